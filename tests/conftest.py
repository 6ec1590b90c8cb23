import numpy as np
import pytest

import graphc as gc


@pytest.fixture
def graph():
    g = gc.Graph("test")
    with g:
        yield g


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def random_array(rng, shape, dtype="float32", low=-3.0, high=3.0):
    """Fresh random data of a graphc dtype (never all zeros)."""
    from graphc.ir import dtypes
    npd = dtypes.to_numpy(dtypes.canonical(dtype))
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if np.dtype(npd).kind in "iu":
        return rng.integers(int(low) - 2, int(high) + 3, size=shape).astype(npd)
    return rng.uniform(low, high, size=shape).astype(npd)
