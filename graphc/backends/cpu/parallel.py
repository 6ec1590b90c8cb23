"""Where kernels are split for threads, along which loop variable, into how many chunks
(the policy; threads.py emits the calls)."""
from __future__ import annotations

import math

from graphc_runtime.dims import Dim, hint
from graphc_runtime.pool import MAX_CHUNKS as POOL_MAX_CHUNKS

from ...ir.primitive import is_transcendental
from ...kernels import index as ix
from ...kernels import kernel as K
from .amx import TILE as AMX_TILE
from .dot_plan import NATIVE_FORMS, blas_plan


TEAM_MIN_WORK = 1 << 16          # element-steps from which a kernel is split for threads:
# the pool's spinning workers take a chunk within microseconds
THREAD_MIN_WORK = 1 << 22        # without the pool, threads are started per call (tens of
# microseconds each): below this the split kernel runs as one call
BLAS_CHUNK_MIN_FLOPS = 1 << 21   # a BLAS product's chunks each keep this much work (and so
# OpenBLAS's standard kernels: every element is summed in the same order for any split)
OWN_CHUNK_MIN_WORK = 1 << 17     # multiply-adds per chunk of graphc's own GEMM kernels, whose
# sums do not depend on the split: a MobileNet-style pointwise convolution (64 x 32 @
# 32 x 1024, 2M) ran on one thread below the OpenBLAS bound, at half the speed of two


def _chunk_min(plan) -> int:
    """The least work (multiply-adds) of one thread's chunk of a product run by `plan`."""
    return OWN_CHUNK_MIN_WORK if plan.get("own") not in (None, *NATIVE_FORMS) else \
        BLAS_CHUNK_MIN_FLOPS


COSTLY_WEIGHT = 8                # element-steps an element of each expensive op (exp,
# tanh, logistic, ...) counts for: an LSTM's gates (32 x 256, three sigmoids and two
# tanh) then run on every thread


def _expensive_ops(stores) -> int:
    """How many distinct transcendental primitives (a math function each) the stores
    evaluate."""
    return sum(1 for e in K.value_exprs([s.value for s in stores])
               if isinstance(e, K.Prim) and is_transcendental(e.op))


def split_work(kern, threads: int):
    """(the work a split kernel must have for threads to pay, the least such work): an
    int or, in a symbolic program, a Dim that the code compares at the call (a split
    kernel then runs as one call when it is smaller)."""
    if isinstance(kern, K.DotKernel) and blas_plan(kern) is not None:
        return _extent(kern.batch_vars + kern.m_vars + kern.n_vars + kern.k_vars), \
            _chunk_min(blas_plan(kern)) * threads
    if isinstance(kern, K.LoopKernel):
        work = _extent(kern.loop_vars) * (1 + COSTLY_WEIGHT * _expensive_ops(kern.stores))
    elif isinstance(kern, K.RowKernel):
        red = _extent(kern.reduced_vars)
        work = _extent(kern.kept_vars) * (red if isinstance(red, Dim) else max(red, 1)) * \
            (len(kern.reductions) + 1)
    elif isinstance(kern, K.DotKernel):
        work = _extent(kern.batch_vars + kern.m_vars + kern.n_vars + kern.k_vars)
    elif isinstance(kern, K.ConvKernel):
        work = _extent(kern.out_vars) * _extent(kern.red_vars)
    else:
        work = 0
    return work, TEAM_MIN_WORK


def split_var(kern, threads: int):
    """(the outer loop variable whose range threads share, whether threads started per
    call are worth it too), or (None, False): run on one thread. A symbolic program
    decides for a typical size (and checks the work at the call, see split_work)."""
    if threads < 2:
        return None, False
    if isinstance(kern, K.DotKernel) and blas_plan(kern) is not None:
        return _blas_split(kern, threads), False
    if isinstance(kern, K.LoopKernel):
        outer = kern.loop_vars
    elif isinstance(kern, K.RowKernel):
        outer = kern.kept_vars
    elif isinstance(kern, K.DotKernel):      # layout nests read a whole image's product
        outer = kern.batch_vars + (() if kern.layouts else kern.m_vars)
    elif isinstance(kern, K.ConvKernel):
        outer = kern.out_vars
    else:
        return None, False
    work = hint(split_work(kern, threads)[0])
    if work < TEAM_MIN_WORK:
        return None, False
    for v in outer:
        if isinstance(v, ix.IVar) and hint(ix.extent_of(v)) >= threads:
            return v, work >= THREAD_MIN_WORK
    return None, False


CHUNKS_PER_THREAD = 4   # a busy machine (bench.contention, DistilBERT-width encoder, 24 ms
# quiet): 44-48 ms with one chunk per thread, 41-43 with up to four
DOT_CHUNK_MIN_EXTENT = 512      # quiet, chunks of 256 columns made W4 (1024^3) 10% and
# W5 8% slower than one chunk per thread; 512 kept them (docs/performance.md)
EXTRA_CHUNK_MIN_WORK = 1 << 20   # work (split_work's units) each chunk keeps where a
# kernel gets more chunks than threads: small kernels stay at one chunk per thread


def split_chunks(kern, split, threads: int, granule: int, work) -> int:
    """How many chunks the pool gets for a kernel split along `split`: one per thread,
    up to CHUNKS_PER_THREAD per thread for large kernels, so that the threads that run
    take over the chunks of a thread the OS has not scheduled; every chunk keeps
    EXTRA_CHUNK_MIN_WORK and at least one granule of the range, and a product's chunk
    DOT_CHUNK_MIN_EXTENT of its split dimension (each chunk packs the other operand's
    panels again); a multiple of the threads, so that on a quiet machine no thread runs a
    chunk more than the others (3 chunks of a 512 x 1536 @ 1536 x 1599 product on 2
    threads: 205 GFLOP/s, 2 chunks: 280). `work`: split_work's, an int or a Dim (its
    typical size counts)."""
    work = hint(work)
    extent = hint(ix.extent_of(split))
    most = max(1, extent // max(granule, 1))
    if isinstance(kern, K.DotKernel):
        most = min(most, extent * _columns_each(kern, split) // DOT_CHUNK_MIN_EXTENT)
    n = max(threads, min(threads * CHUNKS_PER_THREAD, most, work // EXTRA_CHUNK_MIN_WORK))
    return min(POOL_MAX_CHUNKS, n - n % threads)


def split_granule(kern, split) -> int:
    """What a kernel's thread chunks' bounds are multiples of: for the own GEMM kernels
    split along the columns of C, 16 (a 512-bit vector of floats), so that no chunk but
    the last ends in columns done one at a time (a product 272 columns wide in two
    chunks of 136 ran the last 8 columns of the first as scalars); else 1."""
    if not isinstance(kern, K.DotKernel) or split.name not in {
            v.name for v in kern.n_vars if isinstance(v, ix.IVar)}:
        return 1
    plan = blas_plan(kern)
    if plan is not None and plan["own"] == "winograd":     # whole blocks of tile rows
        return 2 * plan["rows"]
    columns = 16 if plan is not None and plan["own"] in ("nn", "nnw") else 1
    if plan is not None and plan["own"] in NATIVE_FORMS:   # whole panels of C's columns
        columns = AMX_TILE
    width = _columns_each(kern, split, plan)   # rows of an image: whole vectors of them
    return columns // math.gcd(columns, width)


def _columns_each(kern, split, plan=None) -> int:
    """Columns of C per step of `split`: an image row's where it is the major of two
    merged column variables (dot_plan.merged_columns), else 1. `plan`: the kernel's
    blas_plan where the caller has it."""
    if plan is None and isinstance(kern, K.DotKernel):
        plan = blas_plan(kern)
    if plan is None or plan.get("merged") != split.name:
        return 1
    return plan["N"] // ix.extent_of(split)


def _blas_split(kern, threads: int):
    """The m or n variable of a BLAS product to split between the pool's threads, or None.
    The split goes along the larger operand's own free dimension (n when B is the bigger
    operand, m when A is), so each thread packs only its share of the big operand
    (docs/performance.md). Chunks stay large.
    Without the pool the product stays one call and OpenBLAS runs its own threads."""
    real = lambda vs: [v for v in vs if isinstance(v, ix.IVar)]
    ms, ns, ks = real(kern.m_vars), real(kern.n_vars), real(kern.k_vars)
    # symbolic sizes: decided for a typical size, the chunks' bounds computed at the call
    M, N, Kd = (hint(_extent(vs)) for vs in (ms, ns, ks))
    plan = blas_plan(kern)
    if hint(_extent(kern.batch_vars)) * M * N * Kd < _chunk_min(plan) * threads:
        return None
    # a convolution read in place (own nnw kernel): whole images per thread, so that no
    # thread gets a column tail narrower than a vector
    images = real(kern.batch_vars)
    if kern.layouts:       # a layout nest reads a whole image's product, or its rows
        return layout_split(kern, threads)
    if plan["own"] == "winograd":      # whole images, else blocks of output rows
        if images and hint(ix.extent_of(images[0])) >= threads:
            return images[0]
        if ix.extent_of(ns[0]) // (2 * plan["rows"]) >= threads:
            return ns[0]
        return ms[0] if M >= 8 * threads else None
    if (plan["own"] == "nnw" or plan.get("merged")) and images and \
            hint(ix.extent_of(images[0])) >= threads:
        return images[0]
    if plan["own"] in NATIVE_FORMS:
        # whole products per thread (attention's heads): each call of the 8-bit or
        # bfloat16 kernel packs both operands, so rows split between threads would pack
        # the other operand once per chunk of rows
        batch = next((v for v in images if hint(ix.extent_of(v)) >= threads), None)
        if batch is not None:
            return batch
    if plan["own"] is None and images and _whole_products(ix.extent_of(images[0]), threads):
        return images[0]
    if plan["own"] == "nnw" and plan["row"]:     # C's rows of an image: split along m
        ns = []
    if plan.get("merged"):     # one run of columns: chunks of whole rows of the image
        ns = [v for v in ns if v.name == plan["merged"]]
    order = (ns + ms) if N * Kd >= M * Kd else (ms + ns)
    for v in order:
        if hint(ix.extent_of(v)) >= 16 * threads:
            return v
    return None


def _whole_products(batch, threads: int) -> bool:
    """Whether threads take whole products of a batched BLAS product: a batch that
    divides evenly between them, or four products a thread or more. Each call packs
    only its own operands; split along m or n, the 16 products (64 x 64, 6,272 terms)
    of a Winograd filter gradient ran at 113 GFLOP/s on 2 threads (OpenBLAS with 32
    columns a call)."""
    batch = hint(batch)
    return batch >= threads and (batch % threads == 0 or batch >= 4 * threads)


LAYOUT_ROWS_MIN = 8     # rows of the product per thread where threads share an image


def layout_rows_split(kern, threads: int) -> bool:
    """Whether threads can share each image of a product with layout nests by its rows
    (channels): the nests keep to the product's rows (kernel.channel_vars) and every thread
    gets LAYOUT_ROWS_MIN of them (a MobileNet-style network at batch 1 on 2 threads)."""
    ms = [v for v in kern.m_vars if isinstance(v, ix.IVar)]
    return len(ms) == 1 and isinstance(ix.extent_of(ms[0]), int) and \
        ix.extent_of(ms[0]) >= LAYOUT_ROWS_MIN * threads and K.channel_vars(kern) is not None


def layout_split(kern, threads: int):
    """The variable threads share a dot kernel with layout nests by: its images where
    there is one for each thread, else the product's rows where layout_rows_split
    allows, else None (one thread runs it)."""
    images = [v for v in kern.batch_vars if isinstance(v, ix.IVar) and
              hint(ix.extent_of(v)) >= threads]     # or a grouped product's groups
    if images:
        return images[0]
    if layout_rows_split(kern, threads):
        return [v for v in kern.m_vars if isinstance(v, ix.IVar)][0]
    return None


_extent = K.extent
