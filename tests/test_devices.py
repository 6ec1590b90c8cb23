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
    from graphc_runtime.cuda_context import nvidia_driver_present
    with pytest.raises(gc.DeviceError) as info:
        exe(np.ones(2, np.float32))
    message = str(info.value)
    assert "\n" not in message
    if not nvidia_driver_present():                # one line that says what is missing
        assert message.startswith("no GPU is present") and "pycuda" not in message
    else:
        assert "pycuda" in message or "no GPU is present" in message


def test_cpu_device_arrays_round_trip_and_feed_executables():
    """to_device(x, 'cpu') gives an array the CPU executable takes, by position or name,
    compiled or loaded; .numpy() and np.asarray copy it back."""
    import graphc_runtime
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    d = gc.to_device(a, "cpu")
    assert d.device == "cpu" and d.shape == (2, 3) and d.dtype == "float32"
    np.testing.assert_array_equal(d.numpy(), a)
    np.testing.assert_array_equal(np.asarray(d), a)
    a[0, 0] = 100                                   # the device array holds its own copy
    assert d.numpy()[0, 0] == 0
    with gc.Graph():
        x = gc.placeholder((2, 3), name="x")
        exe = gc.compile(gc.tanh(x) * 2)
    want = np.tanh(d.numpy()) * 2
    np.testing.assert_allclose(exe(d), want, rtol=1e-6)
    np.testing.assert_allclose(exe(x=d), want, rtol=1e-6)
    with pytest.raises(gc.FeedError, match="expected shape"):
        exe(gc.to_device(np.zeros((3, 2), np.float32), "cpu"))
    with gc.Graph():
        y = gc.placeholder(("n", 3), name="y")
        sym = gc.compile(y.sum(axis=0))
    np.testing.assert_allclose(sym(d), d.numpy().sum(axis=0), rtol=1e-6)
    import tempfile
    with tempfile.TemporaryDirectory() as t:
        exe.save(f"{t}/m.gcx")
        np.testing.assert_allclose(graphc_runtime.load(f"{t}/m.gcx")(x=d), want, rtol=1e-6)


@pytest.mark.skipif(not gc.cuda.is_available(), reason="no CUDA device on this machine")
def test_cuda_round_trip():
    a = np.arange(10, dtype=np.float32)
    d = gc.to_device(a, "cuda")
    assert d.device == "cuda:0"
    np.testing.assert_array_equal(d.numpy(), a)
