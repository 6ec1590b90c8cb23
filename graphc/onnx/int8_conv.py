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

from .int8_products import INT8, UINT8, Dequantized, constant_value, per_tensor, shifted


def exact_conv(xq: gc.Tensor, x_type: int, zx, wq: np.ndarray, strides, pads,
               dilations) -> gc.Tensor | None:
    """conv(xq - zx, wq) in int32 (N, O, OH, OW), exact: xq (N, C, H, W) int32 holding
    8-bit values of ONNX type x_type, zx a per-tensor zero point (a number), wq the
    filter's values (O, C, kH, kW) already centred, each in -128..127. None where the
    geometry is not of this kind (negative padding)."""
    if xq.ndim != 4 or wq.ndim != 4 or x_type not in (UINT8, INT8) or \
            wq.min(initial=0) < -128 or wq.max(initial=0) > 127 or \
            any(lo < 0 or hi < 0 for lo, hi in pads):
        return None
    n, c, h, wd = xq.shape
    o, _, kh, kw = wq.shape
    oa = 128 if x_type == INT8 else 0           # int8 images as uint8: x + 128
    cx = int(zx) + oa
    hp, wp = h + sum(pads[0]), wd + sum(pads[1])
    (sh, sw_), (dh, dw) = strides, dilations
    oh, ow = (hp - (kh - 1) * dh - 1) // sh + 1, (wp - (kw - 1) * dw - 1) // sw_ + 1
    if oh < 1 or ow < 1:
        return None
    # the image's words: four channels a word (their bytes), padded with cx's word
    xw = gc.pack_bytes(shifted(xq, oa), 1)
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
    return gc.reshape(acc, (n, o, oh, ow))


def _centred_filter(wq, zw):
    """The constant filter minus its zero point (a number, or per output channel) as
    int64, or None where either is not constant."""
    w, z = constant_value(wq), constant_value(zw) if zw is not None else np.int64(0)
    if w is None or z is None:
        return None
    z = np.asarray(z, np.int64)
    return w.astype(np.int64) - (z.reshape((-1,) + (1,) * (w.ndim - 1)) if z.size > 1
                                 else z.reshape(()))


def quantized_conv(x: Dequantized, w: Dequantized, strides, pads, dilations,
                   groups: int) -> gc.Tensor | None:
    """The float32 convolution (N, O, OH, OW) of 2-D images x (N, C, H, W) by filters w
    (O, C, kH, kW) as an integer product, or None where it is not of the kind above."""
    if groups != 1 or not (per_tensor(x.scale) and per_tensor(x.zero)) or \
            not (per_tensor(w.scale) or w.axis == 0) or w.scale.dtype != "float32" or \
            x.scale.dtype != "float32" or w.etype != INT8:
        return None
    wq, zx = _centred_filter(w.q, w.zero), constant_value(x.zero) if x.zero is not None else 0
    if wq is None or zx is None:
        return None
    acc = exact_conv(x.q, x.etype, np.asarray(zx).reshape(()), wq, strides, pads, dilations)
    if acc is None:
        return None
    return gc.cast(acc, "float32") * w.scale_with(x, (1, -1, 1, 1))


def integer_conv(ctx, x: gc.Tensor, zx, w, zw, attrs) -> gc.Tensor | None:
    """ConvInteger's and QLinearConv's exact int32 convolution (N, O, *spatial) of the
    node's 8-bit image x (input 0) by its constant filter w, zero points zx (a constant
    per-tensor one) and zw, as exact_conv; None where it is not of that kind."""
    x_type = ctx.operand_types[0] if ctx.operand_types else None
    wq, z = _centred_filter(w, zw), constant_value(zx) if zx is not None else 0
    if x_type is None or wq is None or z is None or np.size(z) != 1 or \
            not isinstance(x, gc.Tensor) or x.dtype != "int32" or \
            attrs.get("group", 1) != 1 or x.ndim not in (3, 4) or wq.ndim != x.ndim:
        return None
    from .ops_pool import geometry
    kernel = list(attrs.get("kernel_shape", wq.shape[2:]))
    begin, end, _, _, strides, dil = geometry(x.shape[2:], kernel, dict(attrs, ceil_mode=0))
    pads = list(zip(begin, end))
    if x.ndim == 3:                       # one row of the 2-D form
        x, wq = gc.reshape(x, x.shape[:2] + (1,) + x.shape[2:]), wq[:, :, None]
        strides, dil, pads = [1] + strides, [1] + dil, [(0, 0)] + pads
    acc = exact_conv(x, x_type, np.asarray(z).reshape(()), wq, strides, pads, dil)
    if acc is None or len(kernel) == 2:
        return acc
    return gc.reshape(acc, acc.shape[:2] + acc.shape[3:])


def dequantized_conv(ctx, strides, pads, dilations, groups: int, one_d: bool):
    """A Conv node's result as quantized_conv where its image and filter inputs are
    dequantized 8-bit integers (a 1-D one as images of one row), else None."""
    dx, dw = (ctx.dequantized.get(name) for name in ctx.node.input[:2])
    if dx is None or dw is None:
        return None
    if one_d:                      # the image and the filter (a constant) as one row
        value = constant_value(dw.q)
        if value is None:
            return None
        dx = Dequantized(gc.reshape(dx.q, dx.q.shape[:2] + (1,) + dx.q.shape[2:]),
                         dx.etype, dx.scale, dx.zero, dx.axis)
        dw = Dequantized(gc.constant(value[:, :, None]), dw.etype, dw.scale, dw.zero,
                         dw.axis)
    return quantized_conv(dx, dw, strides, pads, dilations, groups)
