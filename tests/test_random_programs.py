"""Random programs mixing control flow with views, reductions over axis tuples and their
gradients (tests/random_programs.py), compiled and compared with the reference
interpreter; and the defects such programs found, each as a named regression test.

The default suite runs a few hundred programs; `pytest -m slow` (run once by CI, `make
test-slow`) runs 2,000 more.
"""
import numpy as np
import pytest

import graphc as gc
import random_programs

from compiled import check_compiled


def _run(seeds) -> None:
    failures = []
    for seed in seeds:
        try:
            random_programs.check(seed)
        except Exception as e:          # noqa: BLE001 - every failing seed is reported
            failures.append(f"program {seed}: {type(e).__name__}: {str(e)[:400]}")
    assert not failures, f"{len(failures)} of {len(seeds)} programs failed:\n" + \
        "\n".join(failures[:20])


@pytest.mark.parametrize("chunk", range(4))
def test_random_programs(chunk):
    _run(range(chunk * 75, chunk * 75 + 75))


SLOW_CHUNKS, SLOW_PER_CHUNK = 20, 100


@pytest.mark.slow
@pytest.mark.parametrize("chunk", range(SLOW_CHUNKS))
def test_random_programs_many(chunk):
    start = 10_000 + chunk * SLOW_PER_CHUNK
    _run(range(start, start + SLOW_PER_CHUNK))


def test_generator_mixes_control_flow_views_and_reductions():
    """The programs hold what they are meant to test, in good numbers."""
    seen = {op: 0 for op in ("cond", "scan", "while", "reverse", "slice", "reduce_sum",
                             "reduce_max", "concatenate", "pad")}
    for seed in range(100):
        with gc.Graph("census") as g:
            random_programs.build(seed)
            text = str(g)
        for op in seen:
            seen[op] += f" {op}(" in text or f"= {op}(" in text
    assert all(count >= 10 for count in seen.values()), seen


@pytest.mark.parametrize("shape", [(1,), (1, 1), (3,), (2, 1)])
def test_cond_result_returned_twice(shape):
    """flip over a size-1 axis simplifies away, so the cond's result is two outputs:
    both must hold it (the second used to be left unwritten)."""
    with gc.Graph("cond_flip"):
        x = gc.placeholder(shape, "float64", name="x")
        y = gc.cond(gc.sum(x) > 0, lambda t: gc.tanh(t) * 2, lambda t: t * t - 1, x)
        outs = [y, gc.flip(y, axis=-1), y[..., ::-1] + 1]
        for value in (0.7, -0.3):
            check_compiled(outs, {"x": np.full(shape, value)})


def test_loop_results_returned_twice():
    with gc.Graph("loops_twice"):
        x = gc.placeholder((1, 3), "float32", name="x")
        _, ys = gc.scan(lambda h, r: (h + r, h * r), gc.zeros((3,)), x)
        _, w = gc.while_loop(lambda s: s[0] < 3, lambda s: (s[0] + 1, s[1] * 1.5), (0, x))
        outs = [ys, gc.flip(ys, axis=0), w, gc.flip(w, axis=0), w[::-1, ::-1]]
        check_compiled(outs, {"x": np.array([[0.5, -1.0, 2.0]], np.float32)})


def test_softmax_gradient_over_reversed_rows_compiles():
    """A row kernel keeps an expensive value (exp) of one stage for later stages; a value
    kept under another kept value was never computed (KeyError in the code generator)."""
    with gc.Graph("softmax_grad"):
        x = gc.placeholder((3, 4), "float64", name="x")
        s = gc.softmax(x[:, ::-1], axis=1)
        (gx,) = gc.grad((s * s).sum(), [x])
        check_compiled([s, gx], {"x": np.random.default_rng(0).uniform(-2, 2, (3, 4))})


def test_kept_value_inside_concatenate_branch():
    """A value computed only inside one part of a concatenate is not kept for later
    stages of the row (it is not computed on every path)."""
    with gc.Graph("concat_row"):
        x = gc.placeholder((3, 4), "float32", name="x")
        c = gc.concatenate([gc.exp(x), gc.exp(x[:, ::-1]) * 2], axis=1)
        y = c / c.sum(axis=1, keepdims=True)
        (gx,) = gc.grad((y * y * gc.exp(c)).sum(), [x])
        check_compiled([y, gx], {"x": np.random.default_rng(1).uniform(-2, 2, (3, 4))
                                 .astype(np.float32)})
