"""A convolution over a dilated input (lhs_dilation s > 1: a strided convolution's data
gradient, ONNX's ConvTranspose) as convolutions over the input itself.

The dilated input has s - 1 zeros between neighbours, so output position o = s*q + p
(its phase p) meets input values only through the taps k = k0 + s*t with
k0 = (low padding - p) mod s: y[s*q + p] = sum_t x[q + t + c_p] * w[k0 + s*t]. Each of
the s1 x s2 x ... phases is then a stride-1 convolution of x with every s-th tap of the
filter (and its own padding), which conv_to_gemm runs as a product; the phases'
outputs are interleaved into the result. No multiplication by an inserted zero: a
3 x 3 stride-2 convolution's data gradient costs what the forward does. Where a window
is narrower than s (some phase has no tap, a strided 1 x 1 convolution's gradient) the
input is dilated explicitly (pad with interior zeros) and convolved as is.
"""
from __future__ import annotations

import itertools

from .program import Builder


def _static(*shapes) -> bool:
    return all(isinstance(d, int) for shape in shapes for d in shape)


def input_dilated(b: Builder, node, x, w, again):
    """The phases of conv `node` (x, w) with lhs_dilation > 1, or None where it does not
    apply (strided or filter-dilated windows, groups, symbolic sizes). `again(conv)`:
    the caller's rewrite of a convolution built here (a product, or the conv)."""
    a = node.attrs
    s = tuple(a["lhs_dilation"])
    nsp = len(s)
    if any(d != 1 for d in a["window_strides"]) or any(d != 1 for d in a["rhs_dilation"]) \
            or a["feature_group_count"] != 1 or \
            not _static(x.shape[1:], w.shape, node.shape[2:]):
        return None
    window, out, pads = tuple(w.shape[2:]), tuple(node.shape[2:]), a["padding"]
    plain = dict(a, lhs_dilation=(1,) * nsp)
    if any(k < d for k, d in zip(window, s)):
        dilated = b.add("pad", (x,), {"low": (0,) * x.ndim, "high": (0,) * x.ndim,
                                      "interior": (0, 0) + tuple(d - 1 for d in s),
                                      "value": 0.0})
        return again(b.add("conv", (dilated, w), plain, like=node))
    rows = tuple(-(-o // d) for o, d in zip(out, s))       # outputs per phase, rounded up
    phases = []
    for p in itertools.product(*[range(d) for d in s]):
        k0 = tuple((lo - pi) % d for (lo, _), pi, d in zip(pads, p, s))
        taps = tuple(-(-(k - k0_) // d) for k, k0_, d in zip(window, k0, s))
        low = tuple(-((pi + k0_ - lo) // d) for pi, k0_, (lo, _), d in zip(p, k0, pads, s))
        high = tuple(q - n - lo + t - 1 for q, n, lo, t in zip(rows, x.shape[2:], low, taps))
        sub = b.add("slice", (w,), {"start_indices": (0, 0) + k0,
                                    "limit_indices": tuple(w.shape),
                                    "strides": (1, 1) + s})
        conv = again(b.add("conv", (x, sub), dict(plain, padding=tuple(zip(low, high))),
                           like=node))
        phases.append(b.add("reshape", (conv,), {"new_sizes": (1,) + tuple(conv.shape)}))
    n, o = node.shape[:2]
    stacked = phases[0] if len(phases) == 1 else \
        b.add("concatenate", tuple(phases), {"dimension": 0})
    grid = b.add("reshape", (stacked,), {"new_sizes": s + (n, o) + rows})
    # (s1, .., N, O, q1, ..) -> (N, O, q1, s1, q2, s2, ..): output q*s + p
    perm = (nsp, nsp + 1) + tuple(i for d in range(nsp) for i in (nsp + 2 + d, d))
    y = b.add("transpose", (grid,), {"permutation": perm})
    y = b.add("reshape", (y,), {"new_sizes": (n, o) + tuple(q * d for q, d in zip(rows, s))})
    if tuple(q * d for q, d in zip(rows, s)) != out:
        y = b.add("slice", (y,), {"start_indices": (0,) * y.ndim,
                                  "limit_indices": (n, o) + out, "strides": (1,) * y.ndim})
    return b.add("reshape", (y,), {"new_sizes": tuple(node.shape)}, like=node)
