"""Chained chunks (graphc/schedule/chaining.py): a small loop kernel after a split kernel
runs in that kernel's thread chunks. Results must not change: checked against the
reference interpreter, bitwise across thread counts, and the safety rules one by one."""
import numpy as np
import pytest

import graphc as gc
from graphc.schedule import chaining
from graphc.kernels import kernel as K


def conv_stack(batch=1, reverse_channels=False):
    """Two 3x3 convolutions with bias and relu, the second at stride 2 (the first one's
    output laid out as the second's column planes: the loop kernel that chains; the
    bias and relu are the first product's epilogue), optionally reading the first
    one's channels reversed (which must not chain). Eight input channels: the first
    product runs on the own nnw kernel (with 16 it would be a winograd_conv2d)."""
    rng = np.random.default_rng(0)
    g = gc.Graph("convs")
    with g:
        x = gc.placeholder((batch, 8, 32, 32), name="x")
        w1 = gc.constant(rng.standard_normal((32, 8, 3, 3)).astype(np.float32) * 0.1)
        b1 = gc.constant(rng.standard_normal(32).astype(np.float32))
        w2 = gc.constant(rng.standard_normal((32, 32, 3, 3)).astype(np.float32) * 0.1)
        h = gc.relu(gc.nn.conv2d(x, w1, b1, padding=1))
        if reverse_channels:
            h = h[:, ::-1]
        y = gc.nn.conv2d(h, w2, padding=1, stride=2) * 0.5
    feeds = {"x": rng.standard_normal((batch, 8, 32, 32)).astype(np.float32)}
    return g, y, feeds


@pytest.mark.parametrize("batch", [1, 3])
def test_chained_convolutions_match_the_reference_for_any_thread_count(batch):
    g, y, feeds = conv_stack(batch)
    with g:
        want = gc.evaluate(y, feeds)
        exes = {t: gc.compile(y, num_threads=t) for t in (1, 2, 3)}
    assert exes[1].stats["chained_kernels"] == []          # nothing to chain on one thread
    assert exes[2].stats["chained_kernels"], exes[2].dump("fused")
    got = {t: e(**feeds) for t, e in exes.items()}
    np.testing.assert_allclose(got[2], want, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(got[1], got[2])
    np.testing.assert_array_equal(got[1], got[3])


def test_a_follower_reading_other_rows_of_the_split_axis_is_not_chained():
    g, y, feeds = conv_stack(1, reverse_channels=True)
    with g:
        exe = gc.compile(y, num_threads=2)
        want = gc.evaluate(y, feeds)
    leaders = {a for a, _ in exe.stats["chained_kernels"]}
    # the first product's output is read with its channels reversed: it leads no chain
    first_dot = min((k for k in (r["kernel"] for r in exe.stats["kernel_bytes"])
                     if k.endswith("_dot")), key=lambda n: int(n[1:].split("_")[0]))
    assert first_dot not in leaders
    np.testing.assert_allclose(exe(**feeds), want, rtol=1e-4, atol=1e-4)


def _lowered(g, y, threads=2):
    from graphc.backends.cpu import module as codegen
    seen = {}
    real = codegen.emit_module

    def spy(name, lowered, n, profile=False, **kwargs):
        seen["lowered"] = lowered
        return real(name, lowered, n, profile, **kwargs)
    codegen.emit_module = spy
    try:
        with g:
            gc.compile(y, num_threads=threads)
    finally:
        codegen.emit_module = real
    return seen["lowered"]


def test_the_follower_is_never_placed_over_what_its_leader_reads():
    g, y, feeds = conv_stack(1)
    low = _lowered(g, y)
    plan = gc.backends.cpu.chain_plan(low.kernels, 2, low.memory.offsets)
    assert plan
    for t, u in plan.items():
        leader, follower = low.kernels[t], low.kernels[t + 1]
        split = gc.backends.cpu.split_var(leader, 2)[0]
        assert chaining.follower_split(leader, split, follower, low.memory.offsets) == u
        # memory planning kept them apart; moved over the leader's input, refused
        inputs = [ld.buffer for ld in leader.reads() if ld.buffer.kind == "temp"]
        outputs = [st.buffer for st in follower.stores]
        assert inputs and outputs
        moved = dict(low.memory.offsets)
        moved[outputs[0].id] = low.memory.offsets[inputs[0].id]
        assert chaining.follower_split(leader, split, follower, moved) is None
        assert chaining.follower_split(leader, None, follower, low.memory.offsets) is None


def test_profile_reports_a_follower_with_its_own_time():
    g, y, feeds = conv_stack(1)
    with g:
        exe = gc.compile(y, num_threads=2)
    followers = {b for _, b in exe.stats["chained_kernels"]}
    rows = {r["kernel"]: r for r in exe.profile(repeat=3, **feeds).rows}
    assert followers and all(rows[f]["ms"] > 0 for f in followers)
    assert all(r["ms"] >= 0 for r in rows.values())
