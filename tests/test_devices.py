"""Device discovery and transfers (GPU parts skip without a GPU)."""
import numpy as np
import pytest

import graphc as gc


def test_cpu_is_always_listed():
    assert gc.devices()[0] == "cpu"
    assert all(d.startswith("cuda:") for d in gc.devices()[1:])


def test_to_cpu_round_trip():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    d = gc.to_device(a.T, "cpu")
    assert d.device == "cpu" and d.shape == (3, 2)
    np.testing.assert_array_equal(d.numpy(), a.T)


def test_unknown_device_is_a_clear_error():
    with pytest.raises(gc.DeviceError, match="unknown device 'tpu'"):
        gc.to_device(np.zeros(2), "tpu")


@pytest.mark.skipif(gc.cuda.is_available(), reason="a CUDA device is present")
def test_cuda_without_a_gpu_is_a_device_error():
    assert not gc.cuda.is_available()
    with pytest.raises(gc.DeviceError, match="no CUDA device is available"):
        gc.to_device(np.zeros(2), "cuda")
    with gc.Graph():
        exe = gc.compile(gc.placeholder((2,), name="x") * 2, device="cuda")   # cross-compiles
    assert ".entry" in exe.dump("ptx")
    with pytest.raises(gc.DeviceError, match="pycuda|CUDA driver|no CUDA device"):
        exe(np.ones(2, np.float32))


@pytest.mark.skipif(not gc.cuda.is_available(), reason="no CUDA device on this machine")
def test_cuda_round_trip():
    a = np.arange(10, dtype=np.float32)
    d = gc.to_device(a, "cuda")
    assert d.device == "cuda:0"
    np.testing.assert_array_equal(d.numpy(), a)
