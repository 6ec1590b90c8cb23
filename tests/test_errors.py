"""Graph-building and feeding mistakes raise clear errors naming what was wrong and where."""
import os

import numpy as np
import pytest

import graphc as gc

THIS_FILE = os.path.basename(__file__)


def _here_line(offset=0):
    import inspect
    return inspect.currentframe().f_back.f_lineno + offset


def assert_located(err, line):
    assert err.loc is not None and err.loc.endswith(f"{THIS_FILE}:{line}"), err.loc
    assert f"{THIS_FILE}:{line}" in str(err)


def test_add_shape_mismatch_names_shapes_and_line(graph):
    a = gc.placeholder((3, 4), name="a")
    b = gc.placeholder((5,), name="b")
    with pytest.raises(gc.ShapeError) as info:
        line = _here_line(1)
        a + b
    msg = str(info.value)
    assert "add" in msg and "(3, 4)" in msg and "(5,)" in msg
    assert_located(info.value, line)


def test_matmul_mismatch(graph):
    a = gc.placeholder((3, 4), name="a")
    b = gc.placeholder((5, 6), name="b")
    with pytest.raises(gc.ShapeError) as info:
        line = _here_line(1)
        a @ b
    assert "matmul" in str(info.value) and "f32[3,4]" in str(info.value) \
        and "f32[5,6]" in str(info.value) and "4 vs 5" in str(info.value)
    assert_located(info.value, line)


def test_bad_axis(graph):
    a = gc.placeholder((3, 4), name="a")
    with pytest.raises(gc.ShapeError) as info:
        line = _here_line(1)
        a.sum(axis=2)
    assert "axis 2 is out of range" in str(info.value) and "rank 2" in str(info.value)
    assert_located(info.value, line)
    with pytest.raises(gc.ShapeError, match="repeated axis"):
        a.sum(axis=(0, -2))


def test_bad_reshape(graph):
    a = gc.placeholder((3, 4), name="a")
    with pytest.raises(gc.ShapeError) as info:
        line = _here_line(1)
        a.reshape(5, 3)
    assert "f32[3,4]" in str(info.value) and "(5, 3)" in str(info.value)
    assert_located(info.value, line)


def test_dtype_misuse(graph):
    f = gc.placeholder((3,), name="f")
    i = gc.placeholder((3,), "int32", name="i")
    b = gc.placeholder((3,), "bool", name="b")
    with pytest.raises(gc.DTypeError, match="bitwise_and: needs bool or integer operands, got float32"):
        f & f
    with pytest.raises(gc.DTypeError, match="arithmetic on bool"):
        b + b
    with pytest.raises(gc.DTypeError) as info:
        line = _here_line(1)
        gc.where(i, f, f)
    assert "condition must be bool" in str(info.value) and "i32[3]" in str(info.value)
    assert_located(info.value, line)


def test_primitive_level_errors_are_located(graph):
    from graphc.api import bind
    a = gc.placeholder((3,), name="a")
    b = gc.placeholder((3,), "float64", name="b")
    with pytest.raises(gc.DTypeError) as info:
        line = _here_line(1)
        bind("add", a, b)
    assert "add: operands must have equal dtypes" in str(info.value)
    assert "f32[3]" in str(info.value) and "f64[3]" in str(info.value)
    assert_located(info.value, line)


def test_mixing_graphs(graph):
    a = gc.placeholder((3,), name="a")
    with gc.Graph("other"):
        b = gc.placeholder((3,), name="b")
    with pytest.raises(gc.GraphcError, match="cannot be combined"):
        a + b


def test_duplicate_names(graph):
    gc.placeholder((3,), name="x")
    with pytest.raises(gc.GraphcError, match="'x' is already used"):
        gc.variable(np.zeros(3), name="x")


def test_symbolic_truth_value(graph):
    a = gc.placeholder((3,), name="a")
    with pytest.raises(gc.GraphcError, match="no truth value"):
        if a > 0:
            pass
    with pytest.raises(gc.GraphcError, match="cannot become a numpy array"):
        np.asarray(a)


@pytest.fixture
def fed(graph):
    x = gc.placeholder((2, 3), name="x")
    y = gc.placeholder((3,), "int32", name="y")
    return x, y, x.sum() + gc.cast(y, "float32").sum()


def test_feed_wrong_shape(fed):
    *_, out = fed
    with pytest.raises(gc.FeedError, match=r"input 'x': expected shape \(2, 3\), got \(3, 2\)"):
        gc.evaluate(out, {"x": np.zeros((3, 2), np.float32), "y": np.zeros(3, np.int32)})


def test_feed_wrong_dtype(fed):
    *_, out = fed
    with pytest.raises(gc.FeedError, match="input 'y': expected dtype int32, got int64"):
        gc.evaluate(out, {"x": np.zeros((2, 3), np.float32), "y": np.zeros(3, np.int64)})


def test_feed_missing(fed):
    *_, out = fed
    with pytest.raises(gc.FeedError, match=r"missing input 'y' \(i32\[3\]\)"):
        gc.evaluate(out, {"x": np.zeros((2, 3), np.float32)})


def test_feed_unknown(fed):
    *_, out = fed
    with pytest.raises(gc.FeedError, match="unknown input 'z'; the graph's placeholders are: x, y"):
        gc.evaluate(out, {"x": np.zeros((2, 3), np.float32), "y": np.zeros(3, np.int32),
                          "z": np.zeros(1)})


def test_feed_not_an_array(fed):
    *_, out = fed
    with pytest.raises(gc.FeedError, match="input 'x': expected a numpy array f32\\[2,3\\], got list"):
        gc.evaluate(out, {"x": [[0.0] * 3] * 2, "y": np.zeros(3, np.int32)})


def test_non_contiguous_feed_is_accepted(fed):
    x, y, out = fed
    base = np.arange(6, dtype=np.float32).reshape(3, 2)
    got = gc.evaluate(out, {"x": base.T, "y": np.ones(3, np.int32)})
    assert got == pytest.approx(15.0 + 3.0)


def test_no_assert_statements_in_the_package():
    import pathlib
    import re
    root = pathlib.Path(gc.__file__).parent
    offenders = [str(p) for p in root.rglob("*.py")
                 if re.search(r"^\s*assert\b", p.read_text(), re.MULTILINE)]
    assert offenders == []
