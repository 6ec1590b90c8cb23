"""Lowering of kernel IR to LLVM IR for the host CPU (llvmlite).

One module, one entry function `graphc_main(i8** table)`: table[0] is the arena, the
other slots hold external buffers (inputs, outputs, variables, constants). Each kernel
is an internal function over typed `noalias` pointers with plain counted loops whose
innermost dimension is contiguous, so LLVM's loop vectorizer can widen them.
float16/bfloat16 are storage types (math in float32, rounded after each operation, as the
reference does); bool is stored as one byte.
"""
from __future__ import annotations

import math
import os

import llvmlite.ir as ir

from graphc_runtime.cpu import ENTRY_ABI
from graphc_runtime.errors import CompileError
from graphc_runtime.openmp import SYMBOLS as OPENMP_POINTERS

from ..ir import dtypes
from . import index as ix
from . import mathlib
from . import kernel as K

I1, I8, I16, I32, I64 = (ir.IntType(n) for n in (1, 8, 16, 32, 64))
F16, F32, F64 = ir.HalfType(), ir.FloatType(), ir.DoubleType()
VOID = ir.VoidType()

STORAGE = {"float32": F32, "float64": F64, "float16": F16, "bfloat16": I16,
           "int32": I32, "int64": I64, "bool": I8}
COMPUTE = {"float32": F32, "float64": F64, "float16": F32, "bfloat16": F32,
           "int32": I32, "int64": I64, "bool": I1}
LIBM = {  # name: (float32 symbol, float64 symbol)
    "exp": ("expf", "exp"), "log": ("logf", "log"), "log1p": ("log1pf", "log1p"),
    "expm1": ("expm1f", "expm1"), "tanh": ("tanhf", "tanh"), "sin": ("sinf", "sin"),
    "cos": ("cosf", "cos"), "erf": ("erff", "erf"), "pow": ("powf", "pow"),
}
FCMP = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}


def _mangle(t) -> str:
    if isinstance(t, ir.IntType):
        return f"i{t.width}"
    return {F16: "f16", F32: "f32", F64: "f64"}[t]


def _is_float(dtype):
    return dtypes.is_float(dtype)


class ModuleBuilder:
    """Builds the LLVM module for one executable."""

    def __init__(self, name: str, triple: str = "", data_layout: str = ""):
        self.module = ir.Module(name=name)
        if triple:
            self.module.triple = triple
        if data_layout:
            self.module.data_layout = data_layout
        self.kernels: list = []       # (function, buffers, (split var, own threads), trampoline)
        self.threads = 1
        self.scalef = False           # llvm.ldexp is one instruction (AVX-512)

    # -- helpers --------------------------------------------------------------------------
    def intrinsic(self, name, types):
        """Declare an LLVM intrinsic overloaded on `types` (mangled as LLVM expects)."""
        mangled = name + "".join("." + _mangle(t) for t in types)
        if mangled in self.module.globals:
            return self.module.globals[mangled]
        ty = types[0]
        if name == "llvm.fptosi.sat":
            fnty = ir.FunctionType(types[0], [types[1]])
        elif name in ("llvm.maximum", "llvm.minimum"):
            fnty = ir.FunctionType(ty, [ty, ty])
        elif name == "llvm.fmuladd":
            fnty = ir.FunctionType(ty, [ty, ty, ty])
        else:
            fnty = ir.FunctionType(ty, [ty])
        return ir.Function(self.module, fnty, mangled)

    def gemm(self, dtype: str):
        """void graphc_[sd]gemm(order, transA, transB, M, N, K, alpha, A, lda, B, ldb,
        beta, C, ldc) with 32-bit ints (CBLAS)."""
        name = "graphc_sgemm" if dtype == "float32" else "graphc_dgemm"
        if name in self.module.globals:
            return self.module.globals[name]
        ty = COMPUTE[dtype]
        p = ir.PointerType(ty)
        fnty = ir.FunctionType(VOID, [I32] * 6 + [ty, p, I32, p, I32, ty, p, I32])
        return ir.Function(self.module, fnty, name)

    def libm(self, op: str, ty):
        sym = LIBM[op][0 if ty == F32 else 1]
        if sym in self.module.globals:
            return self.module.globals[sym]
        nargs = 2 if op == "pow" else 1
        fn = ir.Function(self.module, ir.FunctionType(ty, [ty] * nargs), sym)
        return fn

    # -- kernels --------------------------------------------------------------------------
    def add_kernel(self, kernel, aliased: set, split: "ix.IVar | None" = None,
                   own_threads: bool = True) -> None:
        """Emit `kernel` as an internal function; `aliased` holds ids of buffers that may
        share memory with another buffer of this kernel (no noalias for them). With a
        `split` loop variable the function takes (begin, end) for it as two last i64
        arguments, so that threads can run disjoint ranges: OpenMP's team when present,
        else threads started for the call if `own_threads`, else one call."""
        buffers = {}
        for load in K.kernel_loads(kernel):
            buffers[load.buffer.id] = load.buffer
        for store in K.kernel_stores(kernel):
            buffers[store.buffer.id] = store.buffer
        if isinstance(kernel, K.ScatterKernel):
            for s in kernel.copy.stores:
                buffers[s.buffer.id] = s.buffer
        bufs = sorted(buffers.values(), key=lambda b: b.id)
        params = [ir.PointerType(STORAGE[b.dtype]) for b in bufs]
        if split is not None:
            params += [I64, I64]
        fn = ir.Function(self.module, ir.FunctionType(VOID, params), kernel.name)
        if not os.environ.get("GRAPHC_EXPORT_KERNELS"):      # profiling: keep symbols
            fn.linkage = "internal"
        else:
            fn.attributes.add("noinline")
        for arg, b in zip(fn.args, bufs):
            if b.id not in aliased:
                arg.add_attribute("noalias")
        entry = fn.append_basic_block("entry")
        builder = ir.IRBuilder(entry)
        em = Emitter(self, builder, {b.id: (arg, b) for arg, b in zip(fn.args, bufs)}, fn)
        if split is not None:
            em.bounds[split.name] = (fn.args[-2], fn.args[-1])
        em.kernel(kernel)
        builder.ret_void()
        trampoline = self._trampoline(fn, bufs) if split is not None else None
        self.kernels.append((fn, bufs, (split, own_threads), trampoline))

    def _trampoline(self, fn, bufs):
        """ptr kN_thread(ptr ctx): ctx holds the buffer addresses, begin and end (i64)."""
        i8p = ir.PointerType(I8)
        tr = ir.Function(self.module, ir.FunctionType(i8p, [i8p]), fn.name + "_thread")
        tr.linkage = "internal"
        b = ir.IRBuilder(tr.append_basic_block("entry"))
        ctx = b.bitcast(tr.args[0], ir.PointerType(I64))
        words = [b.load(b.gep(ctx, [ir.Constant(I64, k)])) for k in range(len(bufs) + 2)]
        args = [b.inttoptr(w, ir.PointerType(STORAGE[x.dtype])) for w, x in zip(words, bufs)]
        b.call(fn, args + words[-2:])
        b.ret(ir.Constant(i8p, None))
        return tr

    def add_main(self, segments, slot_of, arena_offset_of) -> None:
        """graphc_segment_<k>(i8** table) for each run of kernels between collectives,
        and graphc_main(i8** table) calling them all (for programs without collectives)."""
        i8p = ir.PointerType(I8)
        fns = []
        for k, schedule in enumerate(segments):
            fns.append(self._segment(f"graphc_segment_{k}", schedule, slot_of, arena_offset_of))
        fn = ir.Function(self.module, ir.FunctionType(VOID, [ir.PointerType(i8p)]), "graphc_main")
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        for f in fns:
            b.call(f, [fn.args[0]])
        b.ret_void()

    def _segment(self, name, schedule, slot_of, arena_offset_of):
        i8p = ir.PointerType(I8)
        fn = ir.Function(self.module, ir.FunctionType(VOID, [ir.PointerType(i8p)]), name)
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        table = fn.args[0]
        arena = b.load(b.gep(table, [ir.Constant(I64, 0)]))
        cache = {}

        def pointer(buf: K.Buffer):
            if buf.id in cache:
                return cache[buf.id]
            if buf.kind == "temp":
                raw = b.gep(arena, [ir.Constant(I64, arena_offset_of(buf))])
            else:
                raw = b.load(b.gep(table, [ir.Constant(I64, slot_of(buf))]))
            cache[buf.id] = b.bitcast(raw, ir.PointerType(STORAGE[buf.dtype]))
            return cache[buf.id]

        for fn_k, bufs, (split, own_threads), trampoline in schedule:
            ptrs = [pointer(x) for x in bufs]
            if split is None:
                b.call(fn_k, ptrs)
            else:
                self._parallel_call(b, fn_k, ptrs, split, trampoline, own_threads)
        b.ret_void()
        return fn

    def add_entry(self, slots: int, objects: int, input_bytes: list, guarded: list) -> None:
        """i32 graphc_entry(ptr fixed, ptr obj_1, ..., ptr obj_n): the fast call path.

        `fixed` is a table with the arena, variables and constants filled in; obj_k are
        numpy arrays (PyObject*) for the inputs and outputs, whose data pointer the
        wrapper reads from numpy's array struct (the field right after the object
        header, NUMPY_DATA_OFFSET bytes in; the runtime checks this before using it).

        Before running, each input's bytes (`input_bytes[k]` long) are compared with the
        `guarded` (table slot, bytes) ranges the program writes (the arena, variables):
        an input that overlaps one would be read after the program overwrote it, so
        nothing runs and the entry returns k + 1 for the first such input (the runtime
        copies it and calls again); 0 after a run. The global `graphc_entry_abi` tells
        the runtime that the entry has this contract."""
        i8p = ir.PointerType(I8)
        abi = ir.GlobalVariable(self.module, I32, "graphc_entry_abi")
        abi.initializer = ir.Constant(I32, ENTRY_ABI)
        abi.global_constant = True
        fn = ir.Function(self.module, ir.FunctionType(I32, [ir.PointerType(i8p)] +
                                                      [i8p] * objects), "graphc_entry")
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        table = b.alloca(i8p, size=ir.Constant(I64, slots))
        fixed = fn.args[0]
        values = {}
        for k in range(slots):
            if 1 <= k <= objects:
                obj = fn.args[k]
                field = b.bitcast(b.gep(obj, [ir.Constant(I64, NUMPY_DATA_OFFSET)]),
                                  ir.PointerType(i8p))
                value = b.load(field)
            else:
                value = b.load(b.gep(fixed, [ir.Constant(I64, k)]))
            values[k] = value
            b.store(value, b.gep(table, [ir.Constant(I64, k)]))
        clash = ir.Constant(I32, 0)
        ranges = [(b.ptrtoint(values[slot], I64), size) for slot, size in guarded if size]
        for k in reversed(range(len(input_bytes))):       # the first clash wins
            if not input_bytes[k]:
                continue
            start = b.ptrtoint(values[1 + k], I64)
            end = b.add(start, ir.Constant(I64, input_bytes[k]))
            for lo, size in ranges:
                hit = b.and_(b.icmp_unsigned("<", start, b.add(lo, ir.Constant(I64, size))),
                             b.icmp_unsigned("<", lo, end))
                clash = b.select(hit, ir.Constant(I32, k + 1), clash)
        run, refuse = fn.append_basic_block("run"), fn.append_basic_block("refuse")
        b.cbranch(b.icmp_unsigned("==", clash, ir.Constant(I32, 0)), run, refuse)
        b.position_at_end(refuse)
        b.ret(clash)
        b.position_at_end(run)
        b.call(self.module.globals["graphc_main"], [table])
        b.ret(ir.Constant(I32, 0))

    def _parallel_call(self, b, fn_k, ptrs, split, trampoline, own_threads=True) -> None:
        """Run fn_k over `split`'s range in `threads` contiguous chunks. On OpenMP's team
        when the runtime found libgomp (graphc_gomp_parallel set), else chunks 1.. on new
        threads (pthreads) and chunk 0 here, then join; a thread that cannot be started
        runs its chunk here instead. Every element is computed by exactly one call over
        the same chunks either way, so results do not depend on the thread count.
        Kernels not worth threads started per call (`own_threads` false) run as one
        call when there is no team."""
        i8p = ir.PointerType(I8)
        extent = split.hi + 1
        threads = min(self.threads, extent)
        bounds = [extent * t // threads for t in range(threads + 1)]
        contexts = []
        for t in range(threads):
            ctx = b.alloca(I64, size=ir.Constant(I64, len(ptrs) + 2))
            words = [b.ptrtoint(p, I64) for p in ptrs] + [ir.Constant(I64, bounds[t]),
                                                          ir.Constant(I64, bounds[t + 1])]
            for k, w in enumerate(words):
                b.store(w, b.gep(ctx, [ir.Constant(I64, k)]))
            contexts.append(ctx)
        team = b.load(self.openmp()[0])
        with b.if_else(b.icmp_unsigned("!=", b.ptrtoint(team, I64), ir.Constant(I64, 0))) \
                as (on_team, no_team):
            with on_team:
                job = b.alloca(i8p, size=ir.Constant(I64, threads + 2))
                b.store(b.bitcast(trampoline, i8p), b.gep(job, [ir.Constant(I64, 0)]))
                b.store(b.inttoptr(ir.Constant(I64, threads), i8p),
                        b.gep(job, [ir.Constant(I64, 1)]))
                for t, ctx in enumerate(contexts):
                    b.store(b.bitcast(ctx, i8p), b.gep(job, [ir.Constant(I64, t + 2)]))
                fnty = ir.FunctionType(VOID, [i8p, i8p, I32, I32])
                b.call(b.bitcast(team, ir.PointerType(fnty)),
                       [b.bitcast(self.gomp_body(), i8p), b.bitcast(job, i8p),
                        ir.Constant(I32, threads), ir.Constant(I32, 0)])
            with no_team:
                if own_threads:
                    self._pthread_chunks(b, fn_k, ptrs, bounds, contexts, trampoline)
                else:
                    b.call(fn_k, ptrs + [ir.Constant(I64, 0), ir.Constant(I64, extent)])

    def _pthread_chunks(self, b, fn_k, ptrs, bounds, contexts, trampoline) -> None:
        i8p = ir.PointerType(I8)
        create = self.module.globals.get("pthread_create") or ir.Function(
            self.module, ir.FunctionType(I32, [ir.PointerType(I64), i8p, i8p, i8p]),
            "pthread_create")
        join = self.module.globals.get("pthread_join") or ir.Function(
            self.module, ir.FunctionType(I32, [I64, ir.PointerType(i8p)]), "pthread_join")
        started = []
        for t in range(1, len(contexts)):
            tid = b.alloca(I64)
            rc = b.call(create, [tid, ir.Constant(i8p, None), b.bitcast(trampoline, i8p),
                                 b.bitcast(contexts[t], i8p)])
            failed = b.icmp_signed("!=", rc, ir.Constant(I32, 0))
            with b.if_then(failed):
                b.call(fn_k, ptrs + [ir.Constant(I64, bounds[t]), ir.Constant(I64, bounds[t + 1])])
            started.append((tid, failed))
        b.call(fn_k, ptrs + [ir.Constant(I64, bounds[0]), ir.Constant(I64, bounds[1])])
        for tid, failed in started:
            with b.if_then(b.not_(failed)):
                b.call(join, [b.load(tid), ir.Constant(ir.PointerType(i8p), None)])

    def openmp(self):
        """The pointers the runtime sets to libgomp's GOMP_parallel, omp_get_thread_num
        and omp_get_num_threads (null: no OpenMP; see graphc_runtime.openmp)."""
        i8p = ir.PointerType(I8)
        out = []
        for name in OPENMP_POINTERS:
            if name not in self.module.globals:
                g = ir.GlobalVariable(self.module, i8p, name)
                g.initializer = ir.Constant(i8p, None)
            out.append(self.module.globals[name])
        return out

    def gomp_body(self):
        """void graphc_gomp_body(i8** job): what each OpenMP thread runs. job[0] is a
        chunk trampoline, job[1] the number of chunks, job[2 + c] chunk c's context;
        thread t runs chunks t, t + n, ... of a team of n (libgomp may give fewer
        threads than asked for: every chunk still runs exactly once)."""
        name = "graphc_gomp_body"
        if name in self.module.globals:
            return self.module.globals[name]
        i8p = ir.PointerType(I8)
        fn = ir.Function(self.module, ir.FunctionType(VOID, [i8p]), name)
        fn.linkage = "internal"
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        job = b.bitcast(fn.args[0], ir.PointerType(i8p))
        _, thread_num, num_threads = self.openmp()
        query = lambda ptr: b.sext(b.call(b.bitcast(b.load(ptr), ir.PointerType(
            ir.FunctionType(I32, []))), []), I64)
        first, team = query(thread_num), query(num_threads)
        team = b.select(b.icmp_signed("<", team, ir.Constant(I64, 1)), ir.Constant(I64, 1), team)
        tramp = b.bitcast(b.load(b.gep(job, [ir.Constant(I64, 0)])),
                          ir.PointerType(ir.FunctionType(i8p, [i8p])))
        chunks = b.ptrtoint(b.load(b.gep(job, [ir.Constant(I64, 1)])), I64)
        strided_loop(b, first, chunks, team, lambda c: b.call(
            tramp, [b.load(b.gep(job, [b.add(c, ir.Constant(I64, 2))]))]))
        b.ret_void()
        return fn


def strided_loop(b: ir.IRBuilder, start, stop, step, body) -> None:
    """for (i = start; i < stop; i += step) body(i), all i64 and non-negative, emitted
    at the builder's position (which ends after the loop)."""
    pre = b.block
    head = b.append_basic_block("strided.head")
    loop = b.append_basic_block("strided.body")
    done = b.append_basic_block("strided.done")
    b.branch(head)
    b.position_at_end(head)
    i = b.phi(I64)
    i.add_incoming(start, pre)
    b.cbranch(b.icmp_unsigned("<", i, stop), loop, done)
    b.position_at_end(loop)
    body(i)
    i.add_incoming(b.add(i, step), b.block)
    b.branch(head)
    b.position_at_end(done)


BLAS_MIN_FLOPS = 1 << 15
NUMPY_DATA_OFFSET = 16     # PyArrayObject: PyObject_HEAD (refcount, type), then data


def affine(e: ix.IExpr):
    """(coefficients by loop variable name, constant) of an affine index, else None."""
    if isinstance(e, ix.IConst):
        return {}, e.value
    if isinstance(e, ix.IVar):
        return {e.name: 1}, 0
    if isinstance(e, ix.IAdd):
        a, b = affine(e.a), affine(e.b)
        if a is None or b is None:
            return None
        coefs = dict(a[0])
        for name, c in b[0].items():
            coefs[name] = coefs.get(name, 0) + c
        return coefs, a[1] + b[1]
    if isinstance(e, ix.IMul):
        a = affine(e.a)
        return None if a is None else ({n: c * e.c for n, c in a[0].items()}, a[1] * e.c)
    return None


def blas_plan(k: "K.DotKernel"):
    """How to run this dot as BLAS gemm calls (per batch index), or None."""
    from graphc_runtime import blas
    if k.out.dtype not in ("float32", "float64") or k.acc_dtype != k.out.dtype:
        return None
    real = lambda vs: [v for v in vs if isinstance(v, ix.IVar)]
    ms, ns, ks = real(k.m_vars), real(k.n_vars), real(k.k_vars)
    if len(ms) > 1 or len(ns) > 1 or len(ks) > 1 or len(real(k.k_vars)) != len(ks):
        return None
    size = lambda vs: vs[0].hi + 1 if vs else 1
    M, N, Kd = size(ms), size(ns), size(ks)
    if M * N * Kd < BLAS_MIN_FLOPS or max(M, N, Kd) >= 2 ** 31 or not blas.available():
        return None
    plan = {"M": M, "N": N, "K": Kd, "batch_coefs": {}}
    names = {v.name for v in real(k.batch_vars)}
    for operand, rows, cols, key in ((k.lhs, ms, ks, "a"), (k.rhs, ks, ns, "b")):
        if not isinstance(operand, K.Load) or operand.buffer.dtype != k.out.dtype:
            return None
        aff = affine(ix.linearize(operand.index, operand.buffer.shape))
        if aff is None:
            return None
        coefs, const = aff
        if const < 0 or any(c < 0 for c in coefs.values()):
            return None
        r = coefs.get(rows[0].name, 0) if rows else 0
        c = coefs.get(cols[0].name, 0) if cols else 0
        extra = set(coefs) - names - {v.name for v in rows + cols}
        if extra:
            return None
        nr, nc = (M, Kd) if key == "a" else (Kd, N)
        if (c == 1 or nc == 1) and (nr == 1 or r >= nc):
            trans, ld = 111, (r if nr > 1 else max(nc, 1))
        elif (r == 1 or nr == 1) and (nc == 1 or c >= nr):
            trans, ld = 112, (c if nc > 1 else max(nr, 1))
        else:
            return None
        plan[f"trans_{key}"], plan[f"ld{key}"], plan[f"{key}_const"] = trans, max(ld, 1), const
        plan["batch_coefs"][operand.buffer.id] = [(n, coefs[n]) for n in coefs if n in names]
    if k.lhs.buffer.id == k.rhs.buffer.id:
        plan["batch_coefs"][k.lhs.buffer.id] = None     # both operands: computed separately
        la = affine(ix.linearize(k.lhs.index, k.lhs.buffer.shape))[0]
        lb = affine(ix.linearize(k.rhs.index, k.rhs.buffer.shape))[0]
        if [(n, la[n]) for n in la if n in names] != [(n, lb[n]) for n in lb if n in names]:
            return None
        plan["batch_coefs"][k.lhs.buffer.id] = [(n, la[n]) for n in la if n in names]
    return plan


class Emitter:
    """Emits one kernel's loops and expressions into a function."""

    def __init__(self, mb: ModuleBuilder, builder: ir.IRBuilder, args, fn):
        self.mb, self.b, self.args, self.fn = mb, builder, args, fn
        self.env: dict[str, ir.Value] = {}
        self.bounds: dict[str, tuple] = {}    # loop variable -> (begin, end) arguments
        self.accs: dict[int, ir.Value] = {}
        self.cache: dict = {}
        self.stash: dict = {}          # expr id -> row scratch holding its values
        self.row_lin = None            # linear index within the row, while in a row loop
        self.hoisted: list = []        # concatenate choices to decide outside inner loops
        self.resolved: dict = {}       # id(Choose) -> the part chosen by an outer branch
        self.bound: set = set()        # loop variables bound by the enclosing loops

    # -- loops ---------------------------------------------------------------------------
    def loops(self, vars_, body) -> None:
        """Nested counted loops over the IVar loop variables in `vars_` (outer first)."""
        real = [v for v in vars_ if isinstance(v, ix.IVar)]
        self._nest(real, body)

    def _nest(self, vars_, body):
        if not vars_:
            saved = dict(self.cache)
            body()
            self.cache = saved
            return
        for choice in self.hoisted:
            if id(choice) not in self.resolved and ix.variables(choice.index) <= self.bound:
                return self._unswitch(choice, vars_, body)
        v = vars_[0]
        b = self.b
        pre = b.block
        head = b.append_basic_block(f"{v.name}.head")
        loop = b.append_basic_block(f"{v.name}.body")
        done = b.append_basic_block(f"{v.name}.done")
        b.branch(head)
        b.position_at_end(head)
        i = b.phi(I64, v.name)
        begin, end = self.bounds.get(v.name, (ir.Constant(I64, 0), ir.Constant(I64, v.hi + 1)))
        i.add_incoming(begin, pre)
        b.cbranch(b.icmp_signed("<", i, end), loop, done)
        b.position_at_end(loop)
        self.env[v.name] = i
        saved_cache = dict(self.cache)
        self.bound.add(v.name)
        self._nest(vars_[1:], body)
        self.bound.discard(v.name)
        self.cache = saved_cache
        nxt = b.add(i, ir.Constant(I64, 1), flags=["nsw", "nuw"])
        i.add_incoming(nxt, b.block)
        b.branch(head)
        b.position_at_end(done)

    def _unswitch(self, choice: K.Choose, vars_, body) -> None:
        """Branch on a concatenate's part once, outside the remaining loops, and emit
        those loops once per part with the part fixed: the inner loops then hold no
        branches and vectorize."""
        b = self.b
        i = self.index(choice.index)
        merge = b.append_basic_block("part.merge")
        for k in range(len(choice.parts)):
            last = k == len(choice.parts) - 1
            take = b.append_basic_block(f"part.{k}")
            if not last:
                other = b.append_basic_block(f"part.not{k}")
                b.cbranch(b.icmp_signed("<", i, ir.Constant(I64, choice.starts[k + 1])),
                          take, other)
            else:
                b.branch(take)
            b.position_at_end(take)
            saved = dict(self.cache)
            self.resolved[id(choice)] = k
            self._nest(vars_, body)
            del self.resolved[id(choice)]
            self.cache = saved
            b.branch(merge)
            if not last:
                b.position_at_end(other)
        b.position_at_end(merge)

    # -- kernels -------------------------------------------------------------------------
    per_element_dots = False     # GPU: one thread per output element

    def outer_loops(self, vars_, body) -> None:
        """The kernel's outermost (parallel) loops; the CUDA lowering makes them a
        grid-stride loop over threads."""
        self.loops(vars_, body)

    def kernel(self, k) -> None:
        if isinstance(k, K.LoopKernel):
            self.hoisted = hoistable_choices(k)
            self.outer_loops(k.loop_vars, lambda: self.stores(k.stores))
            self.hoisted = []
        elif isinstance(k, K.RowKernel):
            self.outer_loops(k.kept_vars, lambda: self.row(k))
        elif isinstance(k, K.DotKernel):
            self.dot(k)
        elif isinstance(k, K.ConvKernel):
            self.conv(k)
        elif isinstance(k, K.ScatterKernel):
            self.kernel(k.copy)
            self.loops(k.upd_vars, lambda: self.scatter(k))
        else:
            raise CompileError(f"cannot lower kernel {type(k).__name__}")

    def stores(self, stores) -> None:
        values = [self.value(s.value) for s in stores]
        for s, v in zip(stores, values):
            self.store(s.buffer, s.index, v)

    def row(self, k: K.RowKernel) -> None:
        b = self.b
        size = 1
        for n in k.reduced_shape:
            size *= n
        lin_all = ix.linearize(k.reduced_vars, k.reduced_shape)
        scratch = {}
        for st, e in k.stashed:
            ty = self._expr_type(e)
            with b.goto_entry_block():
                scratch[id(e)] = (st, b.alloca(ty, size=ir.Constant(I64, size)))
        self.stash = {}
        self.row_lin = lin_all
        for stage, red in enumerate(k.reductions):
            for e in k.row_values[stage]:      # once per row, before the stage's loop
                self.value(e)
            mine = [(i, ptr) for i, (st, ptr) in scratch.items() if st == stage]
            acc_ty = COMPUTE[red.acc_dtype]
            acc = self._alloca(acc_ty)
            b.store(self._identity(red.kind, red.acc_dtype), acc)
            idx = self._alloca(I64) if red.kind in ("argmax", "argmin") else None
            if idx is not None:
                b.store(ir.Constant(I64, 0), idx)
            lin = ix.linearize(k.reduced_vars, k.reduced_shape)

            def body(red=red, acc=acc, idx=idx, lin=lin, mine=mine):
                v = self.convert_value(self.value(red.value), red.value.dtype, red.acc_dtype)
                for i, ptr in mine:
                    b.store(self.cache[("v", i)][0], b.gep(ptr, [self.index(lin_all)]))
                cur = b.load(acc)
                if idx is None:
                    b.store(self._combine(red.kind, red.acc_dtype, cur, v), acc)
                else:
                    take = self._arg_better(red.kind, red.acc_dtype, v, cur)
                    b.store(b.select(take, v, cur), acc)
                    b.store(b.select(take, self.index(lin), b.load(idx)), idx)
            self.reduced_loops(k.reduced_vars, body)
            value, position = self.combine_partials(red, b.load(acc),
                                                    b.load(idx) if idx is not None else None)
            if idx is None:
                result = self.round_to(value, red.acc_dtype, red.dtype)
            else:
                result = self.cast_int(position, red.dtype)
            self.accs[stage] = result
            self.stash.update(mine)
        for e in k.row_values[-1]:
            self.value(e)
        self.row_stores(k.row_stores)
        if k.full_stores:
            self.reduced_loops(k.reduced_vars, lambda: self.stores(k.full_stores))
        self.row_lin = None
        self.stash = {}

    # hooks the CUDA lowering overrides (a warp per row there)
    def reduced_loops(self, vars_, body) -> None:
        self.loops(vars_, body)

    def combine_partials(self, red, value, position):
        return value, position

    def row_stores(self, stores) -> None:
        self.stores(stores)

    def dot(self, k: K.DotKernel) -> None:
        b = self.b
        out = k.out
        plan = blas_plan(k) if not self.per_element_dots else None
        if plan is not None:
            return self.dot_blas(k, plan)
        # accumulate in the output buffer (row by row), or per element in a register
        direct = out.dtype == k.acc_dtype and not self.per_element_dots

        def zero():
            self.store(out, k.out_index, ir.Constant(COMPUTE[out.dtype], 0))

        def update():
            a = self.value(k.lhs)
            cur = self.load(out, k.out_index)
            self.store(out, k.out_index, self._fma(a, self.value(k.rhs), cur, out.dtype))

        def epilogue():
            self.accs[0] = self.load(out, k.out_index)
            self.cache = {}
            self.stores(k.epilogue)

        if direct:
            def row():
                self.loops(k.n_vars, zero)
                self.loops(k.k_vars, lambda: self.loops(k.n_vars, update))
                if k.epilogue:
                    self.loops(k.n_vars, epilogue)
            self.outer_loops(k.batch_vars + k.m_vars, row)
        else:
            def element():
                acc = self._alloca(COMPUTE[k.acc_dtype])
                b.store(ir.Constant(COMPUTE[k.acc_dtype], 0), acc)

                def step():
                    b.store(self._fma(self.value(k.lhs), self.value(k.rhs), b.load(acc),
                                      k.acc_dtype), acc)
                self.loops(k.k_vars, step)
                self.accs[0] = self.round_to(b.load(acc), k.acc_dtype, out.dtype)
                self.cache = {}
                self.store(out, k.out_index, self.accs[0])
                self.stores(k.epilogue)
            self.outer_loops(k.batch_vars + k.m_vars + k.n_vars, element)

    def dot_blas(self, k: K.DotKernel, plan) -> None:
        """C = A @ B through BLAS per batch index, then the epilogue over C. A kernel
        split for threads computes its rows (m split) or columns (n split) of C."""
        b = self.b
        ty = COMPUTE[k.out.dtype]
        fn = self.mb.gemm(k.out.dtype)
        i32 = lambda v: ir.Constant(I32, int(v))
        c64 = lambda v: ir.Constant(I64, int(v))
        real = lambda vs: [v for v in vs if isinstance(v, ix.IVar)]
        split_m = [v.name for v in real(k.m_vars) if v.name in self.bounds]
        split_n = [v.name for v in real(k.n_vars) if v.name in self.bounds]

        def call():
            ptrs = []
            for operand, const in ((k.lhs, plan["a_const"]), (k.rhs, plan["b_const"])):
                arg, _ = self.args[operand.buffer.id]
                off = ir.Constant(I64, const)
                for name, coef in plan["batch_coefs"][operand.buffer.id]:
                    off = b.add(off, b.mul(self.env[name], ir.Constant(I64, coef)))
                ptrs.append(off)
            c_off = c64(0)
            if k.batch_vars:
                lin = ix.linearize(k.batch_vars, [v.hi + 1 if isinstance(v, ix.IVar) else 1
                                                  for v in k.batch_vars])
                c_off = b.mul(self.index(lin), c64(plan["M"] * plan["N"]))
            rows, cols = i32(plan["M"]), i32(plan["N"])
            if split_m:               # rows begin..end of C: of A's rows (or columns)
                begin, end = self.bounds[split_m[0]]
                rows = b.trunc(b.sub(end, begin), I32)
                step = plan["lda"] if plan["trans_a"] == 111 else 1
                ptrs[0] = b.add(ptrs[0], b.mul(begin, c64(step)))
                c_off = b.add(c_off, b.mul(begin, c64(plan["N"])))
            elif split_n:             # columns begin..end of C: of B's columns (or rows)
                begin, end = self.bounds[split_n[0]]
                cols = b.trunc(b.sub(end, begin), I32)
                step = 1 if plan["trans_b"] == 111 else plan["ldb"]
                ptrs[1] = b.add(ptrs[1], b.mul(begin, c64(step)))
                c_off = b.add(c_off, begin)
            a_ptr = b.gep(self.args[k.lhs.buffer.id][0], [ptrs[0]])
            b_ptr = b.gep(self.args[k.rhs.buffer.id][0], [ptrs[1]])
            c_ptr = b.gep(self.args[k.out.id][0], [c_off])
            b.call(fn, [i32(101), i32(plan["trans_a"]), i32(plan["trans_b"]), rows,
                        cols, i32(plan["K"]), ir.Constant(ty, 1.0), a_ptr,
                        i32(plan["lda"]), b_ptr, i32(plan["ldb"]), ir.Constant(ty, 0.0),
                        c_ptr, i32(plan["N"])])

        self.loops(k.batch_vars, call)
        if k.epilogue:
            def epilogue():
                self.accs[0] = self.load(k.out, k.out_index)
                self.cache = {}
                self.stores(k.epilogue)
            self.loops(k.batch_vars + k.m_vars + k.n_vars, epilogue)

    def conv(self, k: K.ConvKernel) -> None:
        b = self.b

        def element():
            acc = self._alloca(COMPUTE[k.acc_dtype])
            b.store(ir.Constant(COMPUTE[k.acc_dtype], 0), acc)

            def step():
                v = self.convert_value(self.value(k.term), k.term.dtype, k.acc_dtype)
                b.store(b.fadd(b.load(acc), v), acc)
            self.loops(k.red_vars, step)
            self.accs[0] = self.round_to(b.load(acc), k.acc_dtype, k.out.dtype)
            self.cache = {}
            self.store(k.out, k.out_index, self.accs[0])
            self.stores(k.epilogue)
        self.outer_loops(k.out_vars, element)

    def scatter(self, k: K.ScatterKernel) -> None:
        upd = self.value(k.update)
        cur = self.load(k.out, k.target)
        self.store(k.out, k.target, self.arith("add", k.out.dtype, [cur, upd]))

    # -- memory --------------------------------------------------------------------------
    def _alloca(self, ty):
        with self.b.goto_entry_block():
            return self.b.alloca(ty)

    def _ptr(self, buf: K.Buffer, index):
        arg, _ = self.args[buf.id]
        offset = self.index(ix.linearize(index, buf.shape))
        return self.b.gep(arg, [offset], inbounds=True)

    def load(self, buf: K.Buffer, index) -> ir.Value:
        raw = self.b.load(self._ptr(buf, index))
        return self.from_storage(raw, buf.dtype)

    def store(self, buf: K.Buffer, index, value) -> None:
        self.b.store(self.to_storage(value, buf.dtype), self._ptr(buf, index))

    def from_storage(self, raw, dtype):
        b = self.b
        if dtype == "float16":
            return b.fpext(raw, F32)
        if dtype == "bfloat16":
            return b.bitcast(b.shl(b.zext(raw, I32), ir.Constant(I32, 16)), F32)
        if dtype == "bool":
            return b.icmp_unsigned("!=", raw, ir.Constant(I8, 0))
        return raw

    def to_storage(self, value, dtype):
        b = self.b
        if dtype == "float16":
            return b.fptrunc(value, F16)
        if dtype == "bfloat16":
            return self._f32_to_bf16(value)
        if dtype == "bool":
            return b.zext(value, I8)
        return value

    def _f32_to_bf16(self, value):
        """Round to nearest even; NaN stays a (quiet) NaN."""
        b = self.b
        bits = b.bitcast(value, I32)
        lsb = b.and_(b.lshr(bits, ir.Constant(I32, 16)), ir.Constant(I32, 1))
        rounded = b.add(bits, b.add(ir.Constant(I32, 0x7FFF), lsb))
        nan = b.fcmp_unordered("uno", value, value)
        quiet = b.or_(bits, ir.Constant(I32, 0x00400000))
        out = b.select(nan, quiet, rounded)
        return b.trunc(b.lshr(out, ir.Constant(I32, 16)), I16)

    def round_to(self, value, compute_dtype, dtype):
        """A float32 value rounded to float16/bfloat16 precision (kept in float32)."""
        if dtype in ("float16", "bfloat16") and compute_dtype == "float32":
            return self.from_storage(self.to_storage(value, dtype), dtype)
        if dtype != compute_dtype:
            return self.convert_value(value, compute_dtype, dtype)
        return value

    # -- indices -------------------------------------------------------------------------
    def index(self, e: ix.IExpr) -> ir.Value:
        key = ("i", id(e))
        if key in self.cache:
            return self.cache[key][0]
        v = self._index(e)
        self.cache[key] = (v, e)
        return v

    def _index(self, e):
        b = self.b
        if isinstance(e, ix.IConst):
            return ir.Constant(I64, e.value)
        if isinstance(e, ix.IVar):
            return self.env[e.name]
        if isinstance(e, ix.IAdd):
            return b.add(self.index(e.a), self.index(e.b))
        if isinstance(e, ix.IMul):
            return b.mul(self.index(e.a), ir.Constant(I64, e.c))
        if isinstance(e, ix.IDiv):
            a = self.index(e.a)
            if e.a.lo >= 0:
                return b.udiv(a, ir.Constant(I64, e.c))
            q = b.sdiv(a, ir.Constant(I64, e.c))
            r = b.srem(a, ir.Constant(I64, e.c))
            fix = b.and_(b.icmp_signed("!=", r, ir.Constant(I64, 0)),
                         b.icmp_signed("<", a, ir.Constant(I64, 0)))
            return b.sub(q, b.zext(fix, I64))
        if isinstance(e, ix.IMod):
            a = self.index(e.a)
            if e.a.lo >= 0:
                return b.urem(a, ir.Constant(I64, e.c))
            r = b.srem(a, ir.Constant(I64, e.c))
            neg = b.icmp_signed("<", r, ir.Constant(I64, 0))
            return b.select(neg, b.add(r, ir.Constant(I64, e.c)), r)
        if isinstance(e, ix.IClamp):
            a = self.index(e.a)
            lo, hi = ir.Constant(I64, e.lo), ir.Constant(I64, e.hi)
            a = b.select(b.icmp_signed("<", a, lo), lo, a)
            return b.select(b.icmp_signed(">", a, hi), hi, a)
        if isinstance(e, ix.IFromValue):
            v = self.value(e.value)
            return b.sext(v, I64) if v.type.width < 64 else v
        raise CompileError(f"unknown index expression {e!r}")

    # -- values --------------------------------------------------------------------------
    def value(self, e: K.VExpr) -> ir.Value:
        key = ("v", id(e))
        if key in self.cache:
            return self.cache[key][0]
        if id(e) in self.stash and self.row_lin is not None:
            v = self.b.load(self.b.gep(self.stash[id(e)], [self.index(self.row_lin)]))
        else:
            v = self._value(e)
        self.cache[key] = (v, e)
        return v

    def _value(self, e):
        b = self.b
        if isinstance(e, K.Load):
            return self.load(e.buffer, e.index)
        if isinstance(e, K.Const):
            return self.constant(e.value, e.dtype)
        if isinstance(e, K.Acc):
            return self.accs[e.stage]
        if isinstance(e, K.IndexValue):
            i = self.index(e.index)
            ty = COMPUTE[e.dtype]
            if _is_float(e.dtype):
                return b.sitofp(i, ty)
            return b.trunc(i, ty) if ty.width < 64 else i
        if isinstance(e, K.InRange):
            return self.in_range(e)
        if isinstance(e, K.RngValue):
            return self.rng(e)
        if isinstance(e, K.Prim):
            args = [self.value(a) for a in e.args]
            return self.prim(e, args)
        if isinstance(e, K.Choose):
            return self.choose(e)
        raise CompileError(f"unknown expression {e!r}")

    def choose(self, e: K.Choose):
        """Branch to the one part the index falls in; values computed inside a branch
        stay there (the cache is restored), the phi is visible after the merge."""
        if id(e) in self.resolved:
            return self.value(e.parts[self.resolved[id(e)]])
        b = self.b
        i = self.index(e.index)
        merge = b.append_basic_block("choose.merge")
        incoming = []
        for k, part in enumerate(e.parts):
            last = k == len(e.parts) - 1
            take = b.append_basic_block(f"choose.{k}")
            if not last:
                other = b.append_basic_block(f"choose.not{k}")
                b.cbranch(b.icmp_signed("<", i, ir.Constant(I64, e.starts[k + 1])), take, other)
            else:
                b.branch(take)
            b.position_at_end(take)
            saved = dict(self.cache)
            v = self.value(part)
            self.cache = saved
            incoming.append((v, b.block))
            b.branch(merge)
            if not last:
                b.position_at_end(other)
        b.position_at_end(merge)
        phi = b.phi(incoming[0][0].type)
        for v, blk in incoming:
            phi.add_incoming(v, blk)
        return phi

    def constant(self, value, dtype):
        ty = COMPUTE[dtype]
        if dtype == "bool":
            return ir.Constant(I1, int(bool(value)))
        if _is_float(dtype):
            v = float(value)
            if dtype in ("float16", "bfloat16"):
                import numpy as np
                v = float(np.asarray(v, dtypes.to_numpy(dtype)).astype(np.float32))
            elif dtype == "float32":
                import numpy as np
                v = float(np.float32(v))
            return ir.Constant(ty, v)
        return ir.Constant(ty, int(value))

    def in_range(self, e: K.InRange):
        b = self.b
        i = self.index(e.index)
        conds = []
        if e.index.lo < e.lo:
            conds.append(b.icmp_signed(">=", i, ir.Constant(I64, e.lo)))
        if e.index.hi >= e.hi:
            conds.append(b.icmp_signed("<", i, ir.Constant(I64, e.hi)))
        if e.step > 1:
            r = b.srem(i, ir.Constant(I64, e.step))
            conds.append(b.icmp_signed("==", r, ir.Constant(I64, 0)))
        out = ir.Constant(I1, 1)
        for c in conds:
            out = b.and_(out, c)
        return out

    def _expr_type(self, e):
        return COMPUTE[e.dtype]

    def cast_int(self, v, dtype):
        ty = COMPUTE[dtype]
        return self.b.trunc(v, ty) if ty.width < v.type.width else v

    def convert_value(self, v, src, dst):
        """Convert a compute-typed value of dtype `src` to dtype `dst` (compute type)."""
        b = self.b
        if src == dst:
            return v
        st, dt = COMPUTE[src], COMPUTE[dst]
        if dst == "bool":
            if _is_float(src):
                return b.fcmp_unordered("!=", v, ir.Constant(st, 0.0))
            return b.icmp_unsigned("!=", v, ir.Constant(st, 0))
        if src == "bool":
            return b.uitofp(v, dt) if _is_float(dst) else b.zext(v, dt)
        if _is_float(src) and _is_float(dst):
            if st != dt:
                v = b.fpext(v, dt) if dt == F64 else b.fptrunc(v, dt)
            return self.round_to(v, "float32", dst) if dst in ("float16", "bfloat16") else v
        if _is_float(src):
            fn = self.mb.intrinsic("llvm.fptosi.sat", [dt, st])
            return b.call(fn, [v])
        if _is_float(dst):
            out = b.sitofp(v, dt)
            return self.round_to(out, "float32", dst) if dst in ("float16", "bfloat16") else out
        if dt.width > st.width:
            return b.sext(v, dt)
        return b.trunc(v, dt) if dt.width < st.width else v

    def prim(self, e: K.Prim, args):
        op, dtype = e.op, e.dtype
        if op == "convert":
            return self.convert_value(args[0], e.attr, dtype)
        if op == "compare":
            return self.compare(e.attr, e.args[0].dtype, *args)
        if op == "select":
            return self.b.select(*args)
        out = self.arith(op, dtype, args)
        if dtype in ("float16", "bfloat16"):
            out = self.round_to(out, "float32", dtype)
        return out

    def compare(self, direction, dtype, x, y):
        b = self.b
        if _is_float(dtype):
            if direction == "ne":
                return b.fcmp_unordered("!=", x, y)
            return b.fcmp_ordered(FCMP[direction], x, y)
        if dtype == "bool":
            return b.icmp_unsigned(FCMP[direction], x, y)
        return b.icmp_signed(FCMP[direction], x, y)

    def arith(self, op, dtype, args):
        b = self.b
        ty = COMPUTE[dtype]
        if dtype == "bool" or op in ("and", "or", "xor", "not"):
            if op == "and":
                return b.and_(*args)
            if op == "or":
                return b.or_(*args)
            if op == "xor":
                return b.xor(*args)
            if op == "not":
                return b.not_(args[0])
        if _is_float(dtype):
            return self.float_op(op, ty, args)
        return self.int_op(op, ty, args)

    def float_op(self, op, ty, args):
        b = self.b
        x = args[0]
        y = args[1] if len(args) > 1 else None
        one = ir.Constant(ty, 1.0)
        # `contract`: a product feeding a sum may become one fused multiply-add (one
        # rounding instead of two), as C compilers and XLA do by default
        if op == "add":
            return b.fadd(x, y, flags=("contract",))
        if op == "sub":
            return b.fsub(x, y, flags=("contract",))
        if op == "mul":
            return b.fmul(x, y, flags=("contract",))
        if op == "div":
            return b.fdiv(x, y)
        if op == "rem":
            return b.frem(x, y)
        if op == "max":
            return b.call(self.mb.intrinsic("llvm.maximum", [ty]), [x, y])
        if op == "min":
            return b.call(self.mb.intrinsic("llvm.minimum", [ty]), [x, y])
        if op == "neg":
            return b.fneg(x)
        if op == "abs":
            return b.call(self.mb.intrinsic("llvm.fabs", [ty]), [x])
        if op == "sqrt":
            return b.call(self.mb.intrinsic("llvm.sqrt", [ty]), [x])
        if op == "rsqrt":
            return b.fdiv(one, b.call(self.mb.intrinsic("llvm.sqrt", [ty]), [x]))
        if op in ("floor", "ceil"):
            return b.call(self.mb.intrinsic(f"llvm.{op}", [ty]), [x])
        if op == "round":
            return b.call(self.mb.intrinsic("llvm.roundeven", [ty]), [x])
        if op == "sign":
            zero = ir.Constant(ty, 0.0)
            pos = b.fcmp_ordered(">", x, zero)
            neg = b.fcmp_ordered("<", x, zero)
            return b.select(pos, one, b.select(neg, ir.Constant(ty, -1.0), x))
        if ty == F32 and op in mathlib.VECTOR_F32:
            return mathlib.VECTOR_F32[op](b, x, self.mb.scalef)
        if op == "logistic":
            e = b.call(self.mb.libm("exp", ty), [b.fneg(b.call(
                self.mb.intrinsic("llvm.fabs", [ty]), [x]))])
            d = b.fadd(one, e)
            return b.select(b.fcmp_ordered(">=", x, ir.Constant(ty, 0.0)), b.fdiv(one, d),
                            b.fdiv(e, d))
        if op in LIBM:
            return b.call(self.mb.libm(op, ty), args)
        raise CompileError(f"no CPU lowering for float {op}")

    def int_op(self, op, ty, args):
        b = self.b
        x = args[0]
        y = args[1] if len(args) > 1 else None
        zero, one = ir.Constant(ty, 0), ir.Constant(ty, 1)
        if op == "add":
            return b.add(x, y)
        if op == "sub":
            return b.sub(x, y)
        if op == "mul":
            return b.mul(x, y)
        if op in ("div", "rem"):
            is_zero = b.icmp_signed("==", y, zero)
            is_m1 = b.icmp_signed("==", y, ir.Constant(ty, -1))
            safe = b.select(b.or_(is_zero, is_m1), one, y)
            if op == "div":
                q = b.sdiv(x, safe)
                q = b.select(is_m1, b.sub(zero, x), q)
                return b.select(is_zero, zero, q)
            r = b.srem(x, safe)
            r = b.select(is_m1, zero, r)
            return b.select(is_zero, x, r)
        if op == "max":
            return b.select(b.icmp_signed(">", x, y), x, y)
        if op == "min":
            return b.select(b.icmp_signed("<", x, y), x, y)
        if op == "neg":
            return b.sub(zero, x)
        if op == "abs":
            return b.select(b.icmp_signed("<", x, zero), b.sub(zero, x), x)
        if op == "sign":
            return b.sub(b.zext(b.icmp_signed(">", x, zero), ty),
                         b.zext(b.icmp_signed("<", x, zero), ty))
        if op == "and":
            return b.and_(x, y)
        if op == "or":
            return b.or_(x, y)
        if op == "xor":
            return b.xor(x, y)
        if op == "not":
            return b.not_(x)
        raise CompileError(f"no CPU lowering for integer {op}")

    # -- reductions ------------------------------------------------------------------------
    def _identity(self, kind, dtype):
        ty = COMPUTE[dtype]
        if dtype == "bool":
            return ir.Constant(I1, 1 if kind == "min" else 0)
        if _is_float(dtype):
            return ir.Constant(ty, {"sum": 0.0, "prod": 1.0, "max": -math.inf, "min": math.inf,
                                    "argmax": -math.inf, "argmin": math.inf}[kind])
        info = (1 << (ty.width - 1))
        return ir.Constant(ty, {"sum": 0, "prod": 1, "max": -info, "min": info - 1,
                                "argmax": -info, "argmin": info - 1}[kind])

    def _combine(self, kind, dtype, acc, v):
        b = self.b
        if dtype == "bool":
            return b.or_(acc, v) if kind == "max" else b.and_(acc, v)
        if _is_float(dtype):
            if kind == "sum":
                return b.fadd(acc, v, flags=("reassoc",))
            if kind == "prod":
                return b.fmul(acc, v, flags=("reassoc",))
            # NaN still wins; which zero a max/min of -0 and +0 returns is left open (nsz),
            # which saves the sign fix-up in every step of the vectorized reduction
            name = "llvm.maximum" if kind == "max" else "llvm.minimum"
            return b.call(self.mb.intrinsic(name, [acc.type]), [acc, v], fastmath=("nsz",))
        return self.int_op({"sum": "add", "prod": "mul"}.get(kind, kind), COMPUTE[dtype], [acc, v])

    def _arg_better(self, kind, dtype, v, best):
        b = self.b
        if _is_float(dtype):
            strict = b.fcmp_ordered(">" if kind == "argmax" else "<", v, best)
            v_nan = b.fcmp_unordered("uno", v, v)
            best_num = b.fcmp_ordered("ord", best, best)
            return b.or_(strict, b.and_(v_nan, best_num))
        if dtype == "bool":
            return b.icmp_unsigned(">" if kind == "argmax" else "<", v, best)
        return b.icmp_signed(">" if kind == "argmax" else "<", v, best)

    def _fma(self, a, c, acc, dtype):
        b = self.b
        if _is_float(dtype):
            ty = COMPUTE[dtype]
            return b.call(self.mb.intrinsic("llvm.fmuladd", [ty]), [a, c, acc])
        return b.add(acc, b.mul(a, c))

    # -- rng -------------------------------------------------------------------------------
    def rng(self, e: K.RngValue):
        from ..ir.ops.rng import KS_PARITY, ROTATIONS
        b = self.b
        k0, k1 = self.value(e.key0), self.value(e.key1)
        counter = self.index(e.counter)
        c0 = b.trunc(counter, I32)
        c1 = b.trunc(b.lshr(counter, ir.Constant(I64, 32)), I32)
        ks = [k0, k1, b.xor(b.xor(k0, k1), ir.Constant(I32, KS_PARITY))]
        x0, x1 = b.add(c0, ks[0]), b.add(c1, ks[1])
        for block in range(5):
            for r in ROTATIONS[4 * (block % 2): 4 * (block % 2) + 4]:
                x0 = b.add(x0, x1)
                x1 = b.or_(b.shl(x1, ir.Constant(I32, r)), b.lshr(x1, ir.Constant(I32, 32 - r)))
                x1 = b.xor(x1, x0)
            x0 = b.add(x0, ks[(block + 1) % 3])
            x1 = b.add(b.add(x1, ks[(block + 2) % 3]), ir.Constant(I32, block + 1))
        dtype = e.dtype
        if e.distribution == "bits":
            return x0
        from ..ir.ops.rng import MANTISSA_BITS
        if e.distribution == "uniform":
            bits = MANTISSA_BITS[dtype]
            if bits <= 32:
                m = b.lshr(x0, ir.Constant(I32, 32 - bits))
                u = b.fmul(b.uitofp(m, F64 if dtype == "float64" else F32),
                           ir.Constant(F64 if dtype == "float64" else F32, 2.0 ** -bits))
                return u
            hi = b.uitofp(b.lshr(x0, ir.Constant(I32, 5)), F64)
            lo = b.uitofp(b.lshr(x1, ir.Constant(I32, 6)), F64)
            return b.fmul(b.fadd(b.fmul(hi, ir.Constant(F64, 2.0 ** 26)), lo),
                          ir.Constant(F64, 2.0 ** -53))
        # normal: Box-Muller, as the reference computes it
        if dtype == "float64":
            ty = F64
            u1 = b.fmul(b.fadd(b.uitofp(x0, F64), ir.Constant(F64, 1.0)), ir.Constant(F64, 2.0 ** -32))
            u2 = b.fmul(b.uitofp(x1, F64), ir.Constant(F64, 2.0 ** -32))
        else:
            ty = F32
            u1 = b.fmul(b.fadd(b.uitofp(b.lshr(x0, ir.Constant(I32, 8)), F32), ir.Constant(F32, 1.0)),
                        ir.Constant(F32, 2.0 ** -24))
            u2 = b.fmul(b.uitofp(b.lshr(x1, ir.Constant(I32, 8)), F32), ir.Constant(F32, 2.0 ** -24))
        radius = b.call(self.mb.intrinsic("llvm.sqrt", [ty]),
                        [b.fmul(ir.Constant(ty, -2.0), b.call(self.mb.libm("log", ty), [u1]))])
        angle = b.fmul(ir.Constant(ty, float(2 * math.pi) if ty == F64 else
                                   float(__import__("numpy").float32(2 * math.pi))), u2)
        out = b.fmul(radius, b.call(self.mb.libm("cos", ty), [angle]))
        return self.round_to(out, "float32", dtype) if dtype in ("float16", "bfloat16") else out


TEAM_MIN_WORK = 1 << 16          # element-steps from which a kernel is split for threads:
# OpenMP's team of spinning workers takes a chunk within microseconds
THREAD_MIN_WORK = 1 << 22        # without libgomp, threads are started per call (tens of
# microseconds each): below this the split kernel runs as one call
BLAS_CHUNK_MIN_FLOPS = 1 << 21   # a BLAS product's chunks each keep this much work (and so
# OpenBLAS's standard kernels: every element is summed in the same order for any split)


def split_var(kern, threads: int):
    """(the outer loop variable whose range threads share, whether threads started per
    call are worth it too), or (None, False): run on one thread."""
    if threads < 2:
        return None, False
    if isinstance(kern, K.DotKernel) and blas_plan(kern) is not None:
        return _blas_split(kern, threads), False
    if isinstance(kern, K.LoopKernel):
        outer, work = kern.loop_vars, _extent(kern.loop_vars)
    elif isinstance(kern, K.RowKernel):
        outer = kern.kept_vars
        work = _extent(kern.kept_vars) * max(_extent(kern.reduced_vars), 1) * \
            (len(kern.reductions) + 1)
    elif isinstance(kern, K.DotKernel):
        work = _extent(kern.batch_vars + kern.m_vars) * _extent(kern.n_vars) * \
            _extent(kern.k_vars)
        outer = kern.batch_vars + kern.m_vars
    elif isinstance(kern, K.ConvKernel):
        outer, work = kern.out_vars, _extent(kern.out_vars) * _extent(kern.red_vars)
    else:
        return None, False
    if work < TEAM_MIN_WORK:
        return None, False
    for v in outer:
        if isinstance(v, ix.IVar) and v.hi + 1 >= threads:
            return v, work >= THREAD_MIN_WORK
    return None, False


def _blas_split(kern, threads: int):
    """The m or n variable of a BLAS product to split between OpenMP's threads, or None.
    Each thread's call packs all of the operand not split, so the split goes along the
    larger one (m when B is the bigger operand, n when A is). Chunks stay large. Without
    libgomp the product stays one call and OpenBLAS runs its own threads."""
    real = lambda vs: [v for v in vs if isinstance(v, ix.IVar)]
    ms, ns, ks = real(kern.m_vars), real(kern.n_vars), real(kern.k_vars)
    M, N, Kd = _extent(ms), _extent(ns), _extent(ks)
    if _extent(kern.batch_vars) * M * N * Kd < BLAS_CHUNK_MIN_FLOPS * threads:
        return None
    order = (ms + ns) if N * Kd >= M * Kd else (ns + ms)
    for v in order:
        if v.hi + 1 >= 16 * threads:
            return v
    return None


MAX_UNSWITCHED_COPIES = 64     # copies of a loop nest that hoisting choices may make


def hoistable_choices(kern: K.LoopKernel) -> list:
    """The concatenate choices of a loop kernel whose part depends on loop variables
    only (outermost first), while the copies of the inner loops stay few."""
    found, seen = [], set()

    def walk(e):
        if id(e) in seen or not isinstance(e, K.VExpr):
            return
        seen.add(id(e))
        if isinstance(e, K.Choose) and not ix.has_data_index(e.index):
            found.append(e)
        for f in ("args", "parts"):
            for x in getattr(e, f, ()):
                walk(x)
    for s in kern.stores:
        walk(s.value)
    order = {v.name: n for n, v in enumerate(kern.loop_vars) if isinstance(v, ix.IVar)}
    found.sort(key=lambda c: max((order.get(n, 0) for n in ix.variables(c.index)), default=0))
    chosen, copies = [], 1
    for c in found:
        if copies * len(c.parts) <= MAX_UNSWITCHED_COPIES:
            chosen.append(c)
            copies *= len(c.parts)
    return chosen


def _extent(vars_) -> int:
    n = 1
    for v in vars_:
        if isinstance(v, ix.IVar):
            n *= v.hi + 1
    return n


def emit_module(name: str, lowered, threads: int = 1) -> str:
    """LLVM IR text of the whole program: its kernels and graphc_main."""
    from graphc_runtime.cpu import host_features, llvm
    b = llvm()
    triple = b.get_process_triple()
    mb = ModuleBuilder(name, triple=triple)
    mb.threads = threads
    mb.scalef = "+avx512f" in host_features().split(",")
    offsets = lowered.memory.offsets
    segments = [[]]
    for kern in lowered.kernels:
        if isinstance(kern, K.CollectiveKernel):
            segments.append([])               # the runtime runs the collective in between
            continue
        aliased = _aliased_buffers(kern, offsets)
        split, own_threads = split_var(kern, threads)
        mb.add_kernel(kern, aliased, split, own_threads)
        segments[-1].append(mb.kernels[-1])
    mb.add_main(segments, lambda buf: lowered.slots[buf.id], lambda buf: offsets[buf.id])
    external = sorted((lowered.slots[b.id], b) for b in lowered.buffers.values()
                      if b.id in lowered.slots)
    input_bytes = [_size(b) for _, b in external if b.kind == "input"]
    guarded = [(0, lowered.memory.arena_bytes)] + \
        [(slot, _size(b)) for slot, b in external if b.kind == "variable"]
    mb.add_entry(1 + len(lowered.slots), len(lowered.inputs) + len(lowered.outputs),
                 input_bytes, guarded)
    return str(mb.module)


def _aliased_buffers(kern, offsets) -> set:
    """Temp buffers of this kernel whose arena ranges overlap another one of its buffers."""
    bufs = {}
    for ld in K.kernel_loads(kern):
        bufs[ld.buffer.id] = ld.buffer
    for st in K.kernel_stores(kern):
        bufs[st.buffer.id] = st.buffer
    temps = [b for b in bufs.values() if b.kind == "temp"]
    out = set()
    for i, a in enumerate(temps):
        for c in temps[i + 1:]:
            a0, c0 = offsets[a.id], offsets[c.id]
            if a0 < c0 + _size(c) and c0 < a0 + _size(a):
                out.update((a.id, c.id))
    return out


def _size(buf) -> int:
    n = dtypes.itemsize(buf.dtype)
    for d in buf.shape:
        n *= d
    return n


class NativeModule:
    """An optimized LLVM module for the host and its object code."""

    def __init__(self, llvm_ir: str, opt_level: int = 3):
        from graphc_runtime.cpu import host_features, host_target_machine, llvm
        b = llvm()
        try:
            module = b.parse_assembly(llvm_ir)
            module.verify()
        except RuntimeError as e:
            raise CompileError(f"generated LLVM IR is invalid: {e}") from None
        self.target_machine = host_target_machine(opt_level)
        if opt_level > 0:
            pto = b.create_pipeline_tuning_options(speed_level=min(opt_level, 3))
            pto.loop_vectorization = True
            pto.slp_vectorization = True
            pb = b.create_pass_builder(self.target_machine, pto)
            pb.getModulePassManager().run(module, pb)
        self.module = module
        self.optimized_ir = str(module)
        self.object_code = self.target_machine.emit_object(module)
        self.triple = b.get_process_triple()
        self.cpu = b.get_host_cpu_name()
        self.features = host_features()
        self._asm = None

    def assembly(self) -> str:
        if self._asm is None:
            self._asm = self.target_machine.emit_assembly(self.module)
        return self._asm
