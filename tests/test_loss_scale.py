"""gc.optim.dynamic_loss_scale (GradScaler's rule as graph updates) with
precision="fp16": overflowing steps update nothing and halve the scale, good steps
update and grow it, and at a power-of-two scale the updates equal the plain
optimizer's."""
import numpy as np
import pytest

import graphc as gc
from graphc_runtime.errors import GraphcError
from test_cuda_ptx import needs_ptxas, ptxas


def _problem(seed=0):
    rng = np.random.default_rng(seed)
    xv = rng.standard_normal((32, 16)).astype(np.float32)
    yv = rng.integers(0, 4, 32).astype(np.int32)
    w0 = (rng.standard_normal((16, 4)) * 0.1).astype(np.float32)
    return xv, yv, w0


def _step(w0, xs, ys, precision="fp16", scaled=True, **scale):
    with gc.Graph():
        x = gc.placeholder(xs.shape, name="x")
        y = gc.placeholder(ys.shape, "int32", name="y")
        w = gc.variable(w0, name="w")
        loss = gc.nn.softmax_cross_entropy(x @ w, y).mean()
        updates = gc.optim.dynamic_loss_scale(gc.optim.adam, loss, [w], lr=1e-2, **scale) \
            if scaled else gc.optim.adam(loss, [w], lr=1e-2)
        return gc.compile({"loss": loss}, updates=updates, precision=precision)


def test_an_overflowing_step_changes_nothing_and_halves_the_scale():
    xv, yv, w0 = _problem()
    exe = _step(w0, xv, yv, init_scale=2.0 ** 40)      # fp16's range ends at 65504
    before = {k: v.copy() for k, v in exe.variables.items()}
    exe(x=xv, y=yv)
    for name in ("w", "w/adam_m", "w/adam_v", "adam/step"):
        assert np.array_equal(exe.variables[name], before[name]), name
    assert exe.variables["loss_scale/scale"] == 2.0 ** 39
    assert exe.variables["loss_scale/good_steps"] == 0


def test_good_steps_update_and_grow_the_scale_after_the_interval():
    xv, yv, w0 = _problem(1)
    exe = _step(w0, xv, yv, init_scale=256.0, growth_interval=3)
    losses, scales = [], []
    for _ in range(3):
        losses.append(float(exe(x=xv, y=yv)["loss"]))
        scales.append(float(exe.variables["loss_scale/scale"]))
    assert scales == [256.0, 256.0, 512.0]
    assert exe.variables["loss_scale/good_steps"] == 0 and exe.variables["adam/step"] == 3
    assert losses[2] < losses[0]


def test_at_a_power_of_two_scale_the_updates_are_the_optimizers():
    """Scaling by 2^k and back is exact in float32: the same step as plain Adam."""
    xv, yv, w0 = _problem(2)
    scaled = _step(w0, xv, yv, precision="float32", init_scale=1024.0)
    plain = _step(w0, xv, yv, precision="float32", scaled=False)
    for _ in range(3):
        a, b = scaled(x=xv, y=yv), plain(x=xv, y=yv)
        np.testing.assert_allclose(a["loss"], b["loss"], rtol=1e-6)
    np.testing.assert_allclose(scaled.variables["w"], plain.variables["w"], rtol=1e-5,
                               atol=1e-7)


def test_fp16_training_with_loss_scaling_learns():
    xv, yv, w0 = _problem(3)
    exe = _step(w0, xv, yv, init_scale=2.0 ** 16, growth_interval=5)
    first = float(exe(x=xv, y=yv)["loss"])
    for _ in range(40):
        last = float(exe(x=xv, y=yv)["loss"])
    assert last < 0.7 * first and np.isfinite(last)
    assert 0 < exe.variables["loss_scale/scale"] <= 2.0 ** 24


@pytest.mark.parametrize("bad", [dict(init_scale=0.0), dict(backoff_factor=1.0),
                                 dict(growth_factor=0.5), dict(growth_interval=0)])
def test_bad_settings_are_refused(bad):
    xv, yv, w0 = _problem()
    with pytest.raises(GraphcError, match="loss scaling|growth_interval"):
        _step(w0, xv, yv, **bad)


@needs_ptxas
@pytest.mark.parametrize("arch", ["sm_90", "sm_80"])
def test_the_fp16_step_with_loss_scaling_assembles_for_the_gpu(arch, tmp_path):
    xv, yv, w0 = _problem(4)
    with gc.Graph():
        x = gc.placeholder(xv.shape, name="x")
        y = gc.placeholder(yv.shape, "int32", name="y")
        w = gc.variable(w0, name="w")
        loss = gc.nn.softmax_cross_entropy(x @ w, y).mean()
        updates = gc.optim.dynamic_loss_scale(gc.optim.adam, loss, [w])
        exe = gc.compile({"loss": loss}, updates=updates, precision="fp16", device="cuda",
                         arch=arch)
    ptx = exe.dump("ptx")
    assert ".f16" in ptx or "cvt.rn.f16" in ptx        # the operands rounded to float16
    ptxas(ptx, arch, tmp_path)
