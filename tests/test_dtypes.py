"""Type promotion: numpy within a kind, the wider kind across kinds, weak Python scalars."""
import numpy as np
import pytest

import graphc as gc
from graphc.ir import dtypes

STRONG_TABLE = [
    ("float32", "float64", "float64"), ("float16", "float32", "float32"),
    ("float16", "bfloat16", "float32"), ("bfloat16", "float64", "float64"),
    ("int32", "int64", "int64"), ("int32", "float32", "float32"),
    ("int64", "float16", "float16"), ("bool", "int32", "int32"),
    ("bool", "float64", "float64"), ("bool", "bool", "bool"),
    ("int64", "int64", "int64"),
]


@pytest.mark.parametrize("a,b,want", STRONG_TABLE)
def test_promote_table(a, b, want):
    assert dtypes.promote(a, b) == want
    assert dtypes.promote(b, a) == want


@pytest.mark.parametrize("a,b", [(a, b) for a in ("float32", "float64", "int32", "int64")
                                 for b in ("float32", "float64", "int32", "int64")
                                 if dtypes.kind(a) == dtypes.kind(b)])
def test_same_kind_matches_numpy(a, b):
    assert dtypes.promote(a, b) == np.promote_types(a, b).name


@pytest.mark.parametrize("tensor_dtype,scalar,want", [
    ("float16", 2.5, "float16"), ("bfloat16", 1, "bfloat16"), ("int32", 3, "int32"),
    ("int64", 3, "int64"), ("int32", 1.5, "float32"), ("int64", 0.5, "float32"),
    ("bool", 1, "int32"), ("bool", 2.0, "float32"), ("float64", 1, "float64"),
    ("bool", True, "bool"),
])
def test_weak_scalars(graph, tensor_dtype, scalar, want):
    x = gc.placeholder((3,), tensor_dtype, name="x")
    if tensor_dtype == "bool" and isinstance(scalar, bool):
        out = x & scalar
    elif tensor_dtype == "bool":
        out = gc.maximum(gc.cast(x, dtypes.default_dtype(dtypes.scalar_kind(scalar))), scalar)
    else:
        out = x + scalar
    assert out.dtype == want


def test_numpy_scalars_are_strong(graph):
    x = gc.placeholder((3,), "float32", name="x")
    assert (x + np.float64(1.0)).dtype == "float64"
    assert (x + 1.0).dtype == "float32"


def test_arrays_keep_their_dtype_python_data_defaults_to_32_bit(graph):
    assert gc.constant(np.zeros(3)).dtype == "float64"
    assert gc.constant([1.0, 2.0]).dtype == "float32"
    assert gc.constant([1, 2]).dtype == "int32"
    assert gc.constant(True).dtype == "bool"


def test_int_scalar_overflow_is_an_error(graph):
    x = gc.placeholder((3,), "int32", name="x")
    with pytest.raises(gc.DTypeError, match="does not fit in int32"):
        x + 2**40


def test_division_of_ints_gives_float32(graph):
    x = gc.placeholder((3,), "int32", name="x")
    assert (x / 2).dtype == "float32"
    assert (x // 2).dtype == "int32"


def test_canonical_names():
    assert dtypes.canonical(np.float32) == "float32"
    assert dtypes.canonical("bf16") == "bfloat16"
    assert dtypes.canonical(np.dtype("bool")) == "bool"
    with pytest.raises(gc.DTypeError, match="unsupported dtype"):
        dtypes.canonical(np.complex64)
    with pytest.raises(gc.DTypeError):
        dtypes.canonical("float7")
