"""A convolution's patch matrix (each output position's window of the padded input, a
row per channel and tap): its size, and a window view that reads it without a copy.
Used by the products over patches (conv_to_gemm.py, conv_grouped.py,
conv_positions.py).
"""
from __future__ import annotations

from graphc_runtime import dims as sym

from .program import Builder

MAX_PATCH_BYTES = 256 << 20      # a larger patch matrix keeps the direct kernel


def patch_bytes(node, x, w) -> int:
    """Bytes of conv `node`'s patch matrix over x (all channels, every tap; a typical
    size where it is symbolic)."""
    return sym.hint(node.size // node.shape[1] * x.shape[1] * sym.prod(w.shape[2:]) *
                    x.nbytes // max(x.size, 1))


def patch_view(b: Builder, node, xp, window):
    """The patch matrix of conv `node` over its padded input `xp` without copying it: a
    window_view (N, C, *taps, *out), element [n, c, k.., p..] = xp[n, c, p*s + k*d]."""
    a = node.attrs
    n, c = xp.shape[:2]
    full = xp.shape[2:]
    rows = [sym.prod(full[d + 1:]) for d in range(len(window))]
    flat = b.add("reshape", (xp,), {"new_sizes": (n, c, sym.prod(full))})
    steps = tuple(d * r for d, r in zip(a["rhs_dilation"], rows)) + \
        tuple(s * r for s, r in zip(a["window_strides"], rows))
    return b.add("window_view", (flat,), {"sizes": tuple(window) + tuple(node.shape[2:]),
                                          "strides": steps})
