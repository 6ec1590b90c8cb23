"""Products and convolutions of bfloat16 / float16 operands as float32 ones.

Those dtypes are storage types here: the reference computes a product in float32 and
rounds the result once. The CPU's BLAS, own GEMM and Winograd kernels take float32, so a
product left in bfloat16 ran as a plain loop nest (a 1024^3 product: 1.3 s against 11 ms
in float32). This pass converts the operands to float32 (exactly), runs the product or
convolution in float32 and rounds its result back: the reference's arithmetic, on the
fast kernels. In the CPU backend's pipeline, before convolutions become products.
"""
from __future__ import annotations

from graphc_runtime import dims as sym

from .conv_to_gemm import patches_fit
from .program import Program, rebuild

STORAGE_ONLY = ("bfloat16", "float16")
PRODUCTS = ("dot_general", "conv")


TILE_MIN_TERMS = 64       # a convolution's terms per output (C x window) for the tiles
TILE_MIN_CHANNELS = 32    # and its output channels: fewer leave the tiles mostly padding


def _tiles_pay(conv) -> bool:
    """Whether a bfloat16 convolution runs on the tiles (over patches, conv_to_gemm):
    where the patch product is large in both contracted terms and output channels (a
    digits CNN's 8 and 16 channels over 3 x 3 ran 1.7x slower than on the float32
    kernels; a 1 x 1 convolution from 64 to 256 channels at 56 x 56 2x faster)."""
    x, w = conv.inputs
    terms = w.shape[1] * sym.prod(w.shape[2:])
    return patches_fit(conv, x, w) and sym.hint(terms) >= TILE_MIN_TERMS and \
        sym.hint(w.shape[0]) >= TILE_MIN_CHANNELS


def low_precision_products(program: Program, bf16_native: bool = False) -> Program:
    """bf16_native: the CPU multiplies bfloat16 itself (AMX tiles or AVX512-BF16 pair
    products): bfloat16 products stay, and convolutions where _tiles_pay."""
    def rewrite(builder, node, inputs):
        if node.op not in PRODUCTS or node.dtype not in STORAGE_ONLY:
            return None
        if bf16_native and node.dtype == "bfloat16" and (
                node.op == "dot_general" or _tiles_pay(node)):
            return None
        wide = tuple(x if x.dtype == "float32" else
                     builder.add("convert", (x,), {"new_dtype": "float32"}, like=node)
                     for x in inputs)
        out = builder.add(node.op, wide, dict(node.attrs), like=node)
        return builder.add("convert", (out,), {"new_dtype": node.dtype}, like=node)
    return rebuild(program, rewrite)
