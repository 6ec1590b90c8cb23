"""Values: storage conversions, constants, casts, arithmetic, math and random numbers."""
from __future__ import annotations

import math

import llvmlite.ir as ir

from graphc_runtime.dims import Dim
from graphc_runtime.errors import CompileError

from ...ir import dtypes
from ...kernels import kernel as K
from . import mathlib
from . import lowerings
from .types import COMPUTE, F16, F32, F64, FCMP, I1, I8, I16, I32, I64, _is_float


def f32_to_bf16(b: ir.IRBuilder, value):
    """float32 -> bfloat16 bits (i16): round to nearest even; NaN stays a (quiet) NaN."""
    bits = b.bitcast(value, I32)
    lsb = b.and_(b.lshr(bits, ir.Constant(I32, 16)), ir.Constant(I32, 1))
    rounded = b.add(bits, b.add(ir.Constant(I32, 0x7FFF), lsb))
    nan = b.fcmp_unordered("uno", value, value)
    quiet = b.or_(bits, ir.Constant(I32, 0x00400000))
    out = b.select(nan, quiet, rounded)
    return b.trunc(b.lshr(out, ir.Constant(I32, 16)), I16)


class ValueEmitter:
    """Emitter methods that compute one element's value."""

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
            return f32_to_bf16(b, value)
        if dtype == "bool":
            return b.zext(value, I8)
        return value

    def round_to(self, value, compute_dtype, dtype):
        """A float32 value rounded to float16/bfloat16 precision (kept in float32)."""
        if dtype in ("float16", "bfloat16") and compute_dtype == "float32":
            return self.from_storage(self.to_storage(value, dtype), dtype)
        if dtype != compute_dtype:
            return self.convert_value(value, compute_dtype, dtype)
        return value

    # -- indices -------------------------------------------------------------------------

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

    def each_part(self, choice: K.Choose, prefix: str):
        """For each part k of a concatenate (`choice`): yields k with the builder in the
        block taken when choice.index falls in part k (a cascade of `index < start`
        branches); what is computed there stays there (the cache is restored after), and
        each block then branches to the merge block, where the builder ends."""
        b = self.b
        i = self.index(choice.index)
        merge = b.append_basic_block(f"{prefix}.merge")
        for k in range(len(choice.parts)):
            last = k == len(choice.parts) - 1
            take = b.append_basic_block(f"{prefix}.{k}")
            if not last:
                other = b.append_basic_block(f"{prefix}.not{k}")
                b.cbranch(b.icmp_signed("<", i, self.dim(choice.starts[k + 1])), take, other)
            else:
                b.branch(take)
            b.position_at_end(take)
            saved = dict(self.cache)
            yield k
            self.cache = saved
            b.branch(merge)
            if not last:
                b.position_at_end(other)
        b.position_at_end(merge)

    def choose(self, e: K.Choose):
        """Branch to the one part the index falls in; values computed inside a branch
        stay there (the cache is restored), the phi is visible after the merge."""
        if id(e) in self.resolved:
            return self.value(e.parts[self.resolved[id(e)]])
        b = self.b
        incoming = []
        for k in self.each_part(e, "choose"):
            incoming.append((self.value(e.parts[k]), b.block))
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
        if e in self.trivial:             # inside the interior of a split loop
            return ir.Constant(I1, 1)
        i = self.index(e.index)
        conds = []
        if isinstance(e.lo, Dim) or e.index.lo < e.lo:
            conds.append(b.icmp_signed(">=", i, self.dim(e.lo)))
        if isinstance(e.hi, Dim) or e.index.hi >= e.hi:
            conds.append(b.icmp_signed("<", i, self.dim(e.hi)))
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
            return self.float_to_int(v, st, dt)
        if _is_float(dst):
            out = b.sitofp(v, dt)
            return self.round_to(out, "float32", dst) if dst in ("float16", "bfloat16") else out
        if dt.width > st.width:
            return b.sext(v, dt)
        return b.trunc(v, dt) if dt.width < st.width else v

    def float_to_int(self, v, st, dt):
        """Truncation toward zero, saturating out of range, NaN -> 0 (the reference's
        convert), from vector-friendly pieces: llvm.fptosi.sat is split into a branch per
        element by the x86 backend (a quantize loop ran at ~2 ns an element)."""
        import numpy as np
        b = self.b
        bits = dt.width - 1
        np_t = np.float32 if st == F32 else np.float64
        below = float(np.nextafter(np_t(2.0 ** bits), np_t(0)))  # largest float < 2**bits
        top = ir.Constant(st, 2.0 ** bits)
        c = b.call(self.mb.intrinsic("llvm.minnum", [st]), [v, ir.Constant(st, below)])
        c = b.call(self.mb.intrinsic("llvm.maxnum", [st]),
                   [c, ir.Constant(st, -(2.0 ** bits))])
        r = b.fptosi(c, dt)
        r = b.select(b.fcmp_ordered(">=", v, top), ir.Constant(dt, (1 << bits) - 1), r)
        return b.select(b.fcmp_unordered("uno", v, v), ir.Constant(dt, 0), r)

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
        """An elementwise operation, through the lowering tables (lowerings.py)."""
        ty = COMPUTE[dtype]
        if _is_float(dtype) and op not in ("and", "or", "xor", "not"):
            return self.float_op(op, ty, args)
        return self.int_op(op, ty, args)

    def int_op(self, op, ty, args):
        fn = lowerings.INT.get(op)
        if fn is None:
            raise CompileError(f"no lowering for integer {op}")
        return fn(self, ty, *args)

    def float_op(self, op, ty, args):
        fn = lowerings.FLOAT.get(op)
        if fn is not None:
            return fn(self, ty, *args)
        if ty == F32 and op in mathlib.VECTOR_F32:
            return mathlib.VECTOR_F32[op](self.b, args[0], self.mb.scalef)
        if lowerings.libm_names(op):
            return self.b.call(self.mb.libm(op, ty), args)
        raise CompileError(f"no lowering for float {op}")

    # -- reductions ------------------------------------------------------------------------

    def _fma(self, a, c, acc, dtype):
        b = self.b
        if _is_float(dtype):
            ty = COMPUTE[dtype]
            return b.call(self.mb.intrinsic("llvm.fmuladd", [ty]), [a, c, acc])
        return b.add(acc, b.mul(a, c))

    def _term(self, k, a, c, acc, dtype):
        """acc plus a product's term a * c: for packed 8-bit integers (dot_general's
        packed_int8) the four products of a's bytes by c's ("us": a's unsigned, c's
        signed; "su" the other way round)."""
        if not k.packed_int8:
            return self._fma(a, c, acc, dtype)
        if k.packed_int8 == "su":
            a, c = c, a
        return self.b.add(acc, byte_products(self.b, a, c))

    # -- rng -------------------------------------------------------------------------------
    def rng(self, e: K.RngValue):
        from ...ir.ops.rng import KS_PARITY, ROTATIONS
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
        from ...ir.ops.rng import MANTISSA_BITS
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


def byte_products(b: ir.IRBuilder, x, y):
    """The sum of the four products of int32 word x's unsigned bytes by int32 word y's
    signed bytes (what vpdpbusd adds to a lane): the words as <4 x i8>, widened,
    multiplied and summed."""
    i8x4, i32x4 = ir.VectorType(ir.IntType(8), 4), ir.VectorType(ir.IntType(32), 4)
    products = b.mul(b.zext(b.bitcast(x, i8x4), i32x4), b.sext(b.bitcast(y, i8x4), i32x4))
    module = b.module
    name = "llvm.vector.reduce.add.v4i32"
    add = module.globals.get(name) or ir.Function(
        module, ir.FunctionType(ir.IntType(32), [i32x4]), name)
    return b.call(add, [products])
