"""Row reductions: accumulators, their identities and combining steps."""
from __future__ import annotations

import math

import llvmlite.ir as ir


from ...kernels import index as ix
from ...kernels import kernel as K
from .types import COMPUTE, I1, I64, _is_float


class ReductionEmitter:
    """Emitter methods for RowKernel."""

    def row(self, k: K.RowKernel) -> None:
        b = self.b
        size = 1
        for n in k.reduced_shape:
            size *= n
        lin_all = ix.linearize(k.reduced_vars, k.reduced_shape)
        scratch = {}                   # id(expr) -> (stage, row-sized alloca, expr)
        for st, e in k.stashed:
            ty = self._expr_type(e)
            with b.goto_entry_block():
                scratch[id(e)] = (st, b.alloca(ty, size=ir.Constant(I64, size)), e)
        self.stash = {}
        self.row_lin = lin_all
        for stage, red in enumerate(k.reductions):
            for e in k.row_values[stage]:      # once per row, before the stage's loop
                self.value(e)
            mine = [(i, ptr, e) for i, (st, ptr, e) in scratch.items() if st == stage]
            acc_ty = COMPUTE[red.acc_dtype]
            acc = self._alloca(acc_ty)
            b.store(self._identity(red.kind, red.acc_dtype), acc)
            idx = self._alloca(I64) if red.kind in ("argmax", "argmin") else None
            if idx is not None:
                b.store(ir.Constant(I64, 0), idx)
            lin = ix.linearize(k.reduced_vars, k.reduced_shape)

            def body(red=red, acc=acc, idx=idx, lin=lin, mine=mine):
                v = self.convert_value(self.value(red.value), red.value.dtype, red.acc_dtype)
                # a value to keep is usually computed by the stage's value already; not
                # where it lies under a value an earlier stage kept (loaded, not computed)
                for _, ptr, e in mine:
                    b.store(self.value(e), b.gep(ptr, [self.index(lin_all)]))
                if red is k.reductions[-1]:
                    self.stores(k.stage_stores)
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
            self.stash.update((i, ptr) for i, ptr, _ in mine)
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
