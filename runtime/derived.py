"""Constants an artifact stores as a recipe over another tensor it holds, instead of as
bytes: a convolution's Winograd filters U are 16/9 the size of the filters g they are
computed from, and the graph already keeps g. Loading computes U from g with the same
code the compiler folded it with, and checks the result against U's recorded SHA-256
(an ArtifactError otherwise), so a loaded program runs on exactly the constants it was
compiled with.

The arithmetic is elementwise in float64 in a fixed order (no BLAS, no einsum), so the
bits do not depend on the numpy build.
"""
from __future__ import annotations

import hashlib

import numpy as np

from .errors import ArtifactError


def winograd_filter(w: np.ndarray) -> np.ndarray:
    """U (16, O, C) of 3x3 filters w (O, C, 3, 3) for Winograd's F(2x2, 3x3): U[4a + b] =
    (G w G^T)[a, b], G = [[1, 0, 0], [1/2, 1/2, 1/2], [1/2, -1/2, 1/2], [0, 0, 1]]; in w's
    dtype, computed in float64."""
    g = np.asarray(w, np.float64)

    def rows(t, axis):            # G applied along `axis` (of size 3): 4 results
        a, b, c = (np.take(t, k, axis=axis) for k in range(3))
        return [a, ((a + b) + c) * 0.5, ((a - b) + c) * 0.5, c]
    left = rows(g, 2)             # (O, C, 3) each: G w, row by row
    out = [r for t in left for r in rows(t, 2)]      # then w G^T
    return np.stack(out).astype(w.dtype)


RECIPES = {"winograd_filter": (winograd_filter, lambda shape: len(shape) == 4 and
                                tuple(shape[2:]) == (3, 3))}


def find(constants, tensors) -> dict:
    """{constant index: recipe entry} for the constants some recipe computes, bit for bit,
    from one of `tensors` (arrays); an entry names the recipe, the source's SHA-256,
    shape and dtype, and the constant's own SHA-256."""
    made: dict = {}
    for array in tensors:
        for name, (recipe, applies) in RECIPES.items():
            if applies(array.shape) and array.dtype.kind == "f":
                result = recipe(array)
                key = hashlib.sha256(_bytes(result)).hexdigest()
                made.setdefault(key, (name, array))
    out = {}
    for k, c in enumerate(constants):
        raw = _bytes(c)
        digest = hashlib.sha256(raw).hexdigest()
        if digest in made:
            name, source = made[digest]
            out[k] = {"recipe": name, "from": hashlib.sha256(_bytes(source)).hexdigest(),
                      "shape": list(source.shape), "dtype": source.dtype.name,
                      "sha256": digest}
    return out


def compute(entry: dict, source_bytes: bytes | None, shape, dtype, label: str) -> np.ndarray:
    """The constant an entry of `find` describes, from its source's bytes; ArtifactError
    if anything disagrees with what was recorded."""
    try:
        recipe, applies = RECIPES[entry["recipe"]]
        src_shape = tuple(int(d) for d in entry["shape"])
        src_dtype = np.dtype(entry["dtype"])
    except (KeyError, TypeError, ValueError):
        raise ArtifactError(f"{label}: malformed derived-constant entry") from None
    if source_bytes is None:
        raise ArtifactError(f"{label}: the tensor a derived constant is computed from is "
                            f"missing")
    if src_dtype.kind != "f" or not applies(src_shape) or \
            len(source_bytes) != int(np.prod(src_shape)) * src_dtype.itemsize:
        raise ArtifactError(f"{label}: a derived constant's source does not fit its recipe")
    source = np.frombuffer(source_bytes, src_dtype.newbyteorder("<")).astype(src_dtype)
    value = recipe(source.reshape(src_shape))
    if tuple(value.shape) != tuple(shape) or value.dtype.name != dtype or \
            hashlib.sha256(_bytes(value)).hexdigest() != entry.get("sha256"):
        raise ArtifactError(f"{label}: a derived constant computed here differs from the "
                            f"one the program was compiled with")
    return value


def _bytes(a: np.ndarray) -> bytes:
    a = np.ascontiguousarray(a)
    return a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes()
