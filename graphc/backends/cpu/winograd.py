"""The CPU's winograd_conv2d (ir/ops/winograd.py): per image, in blocks of tile rows.

For each image and block of R rows of 2 x 2 output tiles (T = R * W/2 tiles):
1. the input transform writes V (16, C, T): for each channel and tile, B^T d B of the
   4 x 4 patch under it (a loop nest vectorized along a row of tiles);
2. 16 products M[p] (O, T) = U[p] (O, C) @ V[p] (C, T), graphc's own nn GEMM;
3. the output transform writes A^T M A, each tile's 2 x 2 outputs, into the image's
   product (the kernel's scratch when only its epilogue reads it, else its output).
Then the epilogue runs over the image as a DotKernel's does. V and M are stack scratch
of about BLOCK_BYTES each, so a block's transforms and products stay in the core's
L2 cache; a block holds BLOCK_MIN_TILES tiles or more (or the whole image) even past
that, so that the 16 products are wide enough for the GEMM's register tiles. A kernel
split for threads takes whole images, or (one image) a range of output channels: each
thread then transforms the whole input and multiplies its rows.
"""
from __future__ import annotations

import llvmlite.ir as ir

from graphc_runtime.errors import CompileError

from ...ir import dtypes
from ...ir.ops.winograd import AT, BT
from ...kernels import index as ix
from ...kernels import kernel as K
from ..llvm.types import COMPUTE, I64

BLOCK_BYTES = 128 << 10
BLOCK_MIN_TILES = 32    # one image, 2 threads: 256 channels at 14 x 14 in blocks of one
# tile row (7 tiles, each product 7 columns wide) took 1.8 ms against the windowed
# GEMM's 1.2; the whole image in one block (49 tiles) 1.16; 64 channels at 56 x 56
# alike with 28 or 56 tiles a block (0.67 ms against 1.07)


def block_rows(tile_rows: int, tiles_per_row: int, row_bytes: int) -> int:
    """Tile rows per block (a divisor of tile_rows): the most within BLOCK_BYTES, but at
    least the fewest that hold BLOCK_MIN_TILES tiles (all of them in a smaller image)."""
    divisors = [r for r in range(1, tile_rows + 1) if tile_rows % r == 0]
    fit = max(r for r in divisors if r == 1 or r * row_bytes <= BLOCK_BYTES)
    wide = next((r for r in divisors if r * tiles_per_row >= BLOCK_MIN_TILES), tile_rows)
    return max(fit, wide)


def winograd_plan(k: K.WinogradKernel) -> dict:
    """Sizes of k's product: O (M), the image's outputs (N), C (K), and the rows of
    tiles per block."""
    o = ix.extent_of(k.m_vars[0])
    c = ix.extent_of(k.k_vars[0])
    oh, ow = (ix.extent_of(v) for v in k.n_vars)
    per_row = 16 * max(o, c) * (ow // 2) * dtypes.itemsize(k.out.dtype)
    rows = block_rows(oh // 2, ow // 2, per_row)
    return {"own": "winograd", "M": o, "N": oh * ow, "K": c, "rows": rows}


RUN_TILES = 16     # tiles a transform's innermost loop takes at once (a float32 vector)
RUN_MIN_TILES = 8  # rows of fewer tiles are one plain loop: 256 channels at 14 x 14 (7
# tiles a row) ran 6-12% slower in runs of 4 than as LLVM vectorized the row of 7


def tile_runs(name: str, tiles: int):
    """The loops a row of `tiles` tiles is transformed by: (loop variables, the tile's
    index) for runs of L tiles (RUN_TILES, or the largest power of two within `tiles`)
    and, where L does not divide the row, one run of the last L tiles (again over tiles
    the runs before it did: the same values stored twice). The innermost loop is always
    L long, so LLVM vectorizes it whole: a row of 28 tiles had run 12 of them as
    scalars (a row of 14 all: 128 channels at 28 x 28, 1.15x faster in runs). A row of
    fewer than RUN_MIN_TILES tiles is one loop."""
    if tiles < RUN_MIN_TILES:
        every = ix.var(f"{name}_wt", tiles)
        return [((every,), every)]
    lanes = min(RUN_TILES, 1 << (tiles.bit_length() - 1))
    lane = ix.var(f"{name}_wl", lanes)
    runs = []
    if tiles >= lanes:
        step = ix.var(f"{name}_wt", tiles // lanes)
        runs.append(((step, lane), ix.add(ix.mul(step, lanes), lane)))
    if tiles % lanes:
        runs.append(((lane,), ix.add(lane, ix.const(tiles - lanes))))
    return runs


def _combine(coefs, terms, dtype):
    """sum of coefs[i] * terms[i] for coefficients in {-1, 0, 1} (a transform's row)."""
    pos = [t for c, t in zip(coefs, terms) if c == 1]
    neg = [t for c, t in zip(coefs, terms) if c == -1]
    if len(pos) + len(neg) != sum(1 for c in coefs if c) or not pos:
        raise CompileError(f"transform row {coefs} is not a sum and difference of terms")
    acc = pos[0]
    for t in pos[1:]:
        acc = K.Prim(dtype, "add", (acc, t))
    for t in neg:
        acc = K.Prim(dtype, "sub", (acc, t))
    return acc


def _transform(rows, patch, dtype):
    """rows @ patch @ rows^T for a 4 x 4 patch of expressions (`rows` r x 4, +-1/0)."""
    half = [[_combine(r, [patch[i][j] for i in range(4)], dtype) for j in range(4)]
            for r in rows]
    return [[_combine(r, half[a], dtype) for r in rows] for a in range(len(rows))]


class WinogradEmitter:
    """Emitter method for WinogradKernel (mixed into the CPU's Emitter)."""

    def winograd(self, k: K.WinogradKernel) -> None:
        b = self.b
        plan = winograd_plan(k)
        dtype = k.out.dtype
        o, c = plan["M"], plan["K"]
        oh, ow = (ix.extent_of(v) for v in k.n_vars)
        tw, rows = ow // 2, plan["rows"]
        t = rows * tw
        (image,), (och,) = k.batch_vars, k.m_vars
        u_buf, x_buf = k.lhs.buffer, k.rhs.buffer
        v_buf = self._winograd_scratch(k, "v", (16, c, t))
        m_buf = self._winograd_scratch(k, "m", (16, o, t))
        scratch = self._product_scratch(k, plan)
        gemm = self.mb.own_gemm("nn", dtype)
        blk = ix.var(f"{k.name}_wb", (oh // 2) // rows)
        cv, rv = ix.var(f"{k.name}_wc", c), ix.var(f"{k.name}_wr", rows)
        tile_row = ix.add(ix.mul(blk, rows), rv)
        at = lambda base, d: ix.add(ix.mul(base, 2), ix.const(d)) if d else ix.mul(base, 2)  # noqa: E731
        dest, lead = (scratch, ()) if scratch is not None else (k.out, (image,))
        to_v, to_y = [], []       # (the loops over a row's tiles, their stores) per run
        bt, at_rows = BT.astype(int).tolist(), AT.astype(int).tolist()
        for run, tile in tile_runs(k.name, tw):
            flat_tile = ix.add(ix.mul(rv, tw), tile)
            patch = [[K.Load(dtype, x_buf, (image, cv, at(tile_row, i), at(tile, j)))
                      for j in range(4)] for i in range(4)]
            v = _transform(bt, patch, dtype)
            to_v.append((run, [K.Store(v_buf, v[a][bb], (ix.const(4 * a + bb), cv, flat_tile))
                               for a in range(4) for bb in range(4)]))
            m = [[K.Load(dtype, m_buf, (ix.const(4 * i + j), och, flat_tile)) for j in range(4)]
                 for i in range(4)]
            y = _transform(at_rows, m, dtype)
            to_y.append((run, [K.Store(dest, y[a][bb],
                                       lead + (och, at(tile_row, a), at(tile, bb)))
                               for a in range(2) for bb in range(2)]))

        c64 = lambda n: ir.Constant(I64, n)      # noqa: E731
        begin, end = self.bounds.get(och.name, (c64(0), c64(o)))

        def products():
            u_ptr, _ = self.args[u_buf.id]
            v_ptr, m_ptr = self.args[v_buf.id][0], self.args[m_buf.id][0]
            for p in range(16):
                a_ptr = b.gep(u_ptr, [b.add(c64(p * o * c), b.mul(begin, c64(c)))])
                c_ptr = b.gep(m_ptr, [b.add(c64(p * o * t), b.mul(begin, c64(t)))])
                b.call(gemm, [b.sub(end, begin), c64(t), c64(c), a_ptr, c64(c), c64(1),
                              b.gep(v_ptr, [c64(p * c * t)]), c64(t), c_ptr, c64(t)])

        def block():
            for run, stores in to_v:
                self.cache = {}
                self.loops((cv, rv) + run, lambda stores=stores: self.stores(stores))
            products()
            for run, stores in to_y:
                self.cache = {}
                self.loops((och, rv) + run, lambda stores=stores: self.stores(stores))

        def epilogue():
            self.accs[0] = self.load(k.out, k.out_index) if scratch is None else \
                self.load(scratch, k.m_vars + k.n_vars)
            self.cache = {}
            self.stores(k.epilogue)

        if k.n_vars[0].name in self.bounds:      # a thread's rows: whole blocks
            first, last = self.bounds[k.n_vars[0].name]
            self.bounds[blk.name] = (b.sdiv(first, c64(2 * rows)), b.sdiv(last, c64(2 * rows)))

        def image_product():
            self.loops((blk,), block)
            if k.epilogue:
                self.loops(k.m_vars + k.n_vars, epilogue)
            self.dot_fills(k, m_bound=False)
        self.loops(k.batch_vars, image_product)

    def _winograd_scratch(self, k, name: str, shape) -> K.Buffer:
        """A stack buffer of `shape` for k's transforms (64-byte aligned)."""
        size = shape[0] * shape[1] * shape[2]
        buf = K.Buffer(-(1 << 40) - 2 * k.out.id - (name == "m"), shape, k.out.dtype, "temp")
        with self.b.goto_entry_block():
            ptr = self.b.alloca(COMPUTE[k.out.dtype], size=ir.Constant(I64, size))
            ptr.align = 64
        self.args[buf.id] = (ptr, buf)
        return buf
