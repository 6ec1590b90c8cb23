"""A QDQ model's quantized convolution as graphc's byte products: Conv(DequantizeLinear(x),
DequantizeLinear(w)) with x per-tensor and w symmetric (zero points 0), per-tensor or per
output channel, no groups: the int8 filter times the image's uint8 patches, an exact
int32 product (dot_general packed_int8="su") scaled once:

    conv(sx * (x - zx), sw * w)[o] = sx * sw[o] * (w[o] . patches(x') - cx * sum(w[o]))

with x' = x + 128 for int8 activations and cx = zx (+ 128). The image is packed four
channels to a word (gc.pack_bytes along C, in the kernel that quantizes it) and padded
with cx's bytes, so the padding counts as zero; a 1 x 1 convolution multiplies those
words where they lie, a larger window copies its patches' words (a window_view). The
result comes out as (N, O, OH, OW), with no transpose. Grouped and depthwise
convolutions stay in floating point."""
from __future__ import annotations

import numpy as np

import graphc as gc
from graphc.tensor import bind

from .int8_products import INT8, UINT8, Dequantized, constant_value, shifted


def quantized_conv(x: Dequantized, w: Dequantized, strides, pads, dilations,
                   groups: int) -> gc.Tensor | None:
    """The float32 convolution (N, O, OH, OW) of 2-D images x (N, C, H, W) by filters w
    (O, C, kH, kW) as an integer product, or None where it is not of the kind above."""
    per_tensor = lambda v: v is None or v.ndim == 0 or v.size == 1   # noqa: E731
    if groups != 1 or x.q.ndim != 4 or w.q.ndim != 4 or x.etype not in (UINT8, INT8) or \
            w.etype != INT8 or not (per_tensor(x.scale) and per_tensor(x.zero)):
        return None
    if not (per_tensor(w.scale) or w.axis == 0) or w.scale.dtype != "float32" or \
            x.scale.dtype != "float32" or any(lo < 0 or hi < 0 for lo, hi in pads):
        return None
    wq, zx = constant_value(w.q), constant_value(x.zero) if x.zero is not None else 0
    if wq is None or zx is None or (w.zero is not None and
                                    np.any(constant_value(w.zero) != 0)):
        return None
    n, c, h, wd = x.q.shape
    o, _, kh, kw = wq.shape
    oa = 128 if x.etype == INT8 else 0          # int8 images as uint8: x + 128
    cx = int(np.asarray(zx).reshape(())) + oa
    hp, wp = h + sum(pads[0]), wd + sum(pads[1])
    (sh, sw_), (dh, dw) = strides, dilations
    oh, ow = (hp - (kh - 1) * dh - 1) // sh + 1, (wp - (kw - 1) * dw - 1) // sw_ + 1
    if oh < 1 or ow < 1:
        return None
    # the image's words: four channels a word (their bytes), padded with cx's word
    xw = gc.pack_bytes(shifted(x.q, oa), 1)
    if any(lo or hi for lo, hi in pads):
        word = int(np.array(cx * 0x01010101, np.int64).astype(np.uint32).view(np.int32))
        xw = gc.pad(xw, [(0, 0), (0, 0), tuple(pads[0]), tuple(pads[1])],
                    constant_values=np.int32(word))
    cw = xw.shape[1]
    if (kh, kw, sh, sw_) == (1, 1, 1, 1):
        rows = gc.reshape(xw, (n, cw, oh * ow))
    else:                      # (N, kH * kW * Cw, OH * OW): the patches' words
        windows = bind("window_view", gc.reshape(xw, (n, cw, hp * wp)),
                       sizes=(kh, kw, oh, ow), strides=(dh * wp, dw, sh * wp, sw_))
        rows = gc.reshape(gc.transpose(windows, (0, 2, 3, 1, 4, 5)),
                          (n, kh * kw * cw, oh * ow))
    # the filter's words in the same order: (O, kH, kW, Cw)
    taps = np.moveaxis(wq, 1, -1).astype(np.int64)
    filt = gc.pack_bytes(gc.constant(taps.astype(np.int32)), -1)
    filt = gc.broadcast_to(gc.reshape(filt, (1, o, kh * kw * cw)), (n, o, kh * kw * cw))
    acc = bind("dot_general", filt, rows, lhs_contracting=(2,), rhs_contracting=(1,),
               lhs_batch=(0,), rhs_batch=(0,), packed_int8="su")          # (N, O, P)
    if cx:
        sums = taps.reshape(o, -1).sum(axis=1)
        acc = acc - gc.constant((cx * sums).astype(np.int32).reshape(1, o, 1))
    scale = gc.reshape(x.scale, ()) * (gc.reshape(w.scale, ()) if per_tensor(w.scale)
                                       else gc.reshape(w.scale, (1, o, 1)))
    return gc.reshape(gc.cast(acc, "float32") * scale, (n, o, oh, ow))


def dequantized_conv(ctx, strides, pads, dilations, groups: int, one_d: bool):
    """A Conv node's result as quantized_conv where its image and filter inputs are
    dequantized 8-bit integers (a 1-D one as images of one row), else None."""
    dx, dw = (ctx.dequantized.get(name) for name in ctx.node.input[:2])
    if dx is None or dw is None:
        return None
    if one_d:
        row = lambda d: Dequantized(gc.reshape(d.q, d.q.shape[:2] + (1,) + d.q.shape[2:]),  # noqa: E731
                                    d.etype, d.scale, d.zero, d.axis)
        dx, dw = row(dx), row(dw)
    return quantized_conv(dx, dw, strides, pads, dilations, groups)
