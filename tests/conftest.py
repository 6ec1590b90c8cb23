import os
import sys

import numpy as np
import pytest
from hypothesis import settings

import graphc as gc

# the repository root, so tests can use the benchmark models (bench/)
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Random graphs explore freely on developer machines; in CI (CI=true) the same examples
# run every time, so a submission's result does not depend on luck.
settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
if os.environ.get("CI", "").lower() == "true":
    settings.load_profile("ci")


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
