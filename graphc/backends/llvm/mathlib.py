"""Vectorizable float32 math in LLVM IR: exp, log, tanh, logistic, erf (polynomials).

Written with plain arithmetic, bit operations, selects and vectorizable intrinsics (no
library calls), so loops that use them stay vectorizable. Each takes `scalef`: true where
the backend defines `graphc_scalef(y, n)` = y * 2**n as one vectorizable instruction
(AVX-512's vscalefps, backends/cpu/scalef.py); the bits are the same either way. Accuracy: within a few ulp of a correctly rounded result over the
whole float32 range; inf, nan, zeros and denormals behave as in IEEE/C99.
"""
from __future__ import annotations

import llvmlite.ir as ir

F32 = ir.FloatType()
I32 = ir.IntType(32)


def _c(v):
    return ir.Constant(F32, float(v))


def _i(v):
    return ir.Constant(I32, int(v))


def _fma(b, x, y, z):
    """x * y + z, fused where the target has FMA (llvm.fmuladd)."""
    return b.call(_declare(b, "llvm.fmuladd", 3), [x, y, z])


def _poly(b, x, coefs):
    """Horner: ((c0 * x + c1) * x + c2) ..., with fused multiply-adds."""
    acc = _c(coefs[0])
    for c in coefs[1:]:
        acc = _fma(b, acc, x, _c(c))
    return acc


def _pow2(b, n):
    """2**n as float32 for integer n in [-126, 127] (n an i32)."""
    return b.bitcast(b.shl(b.add(n, _i(127)), _i(23)), F32)


def exp_f32(b: ir.IRBuilder, x, scalef: bool = False):
    """e**x: n = round(x / ln 2), r = x - n ln 2 (two-part ln 2), e**r by Horner to r**7
    (|r| <= ln2/2: below 1e-8 relative), then y * 2**n rounded once. With `scalef` that
    is a call of graphc_scalef (one AVX-512 vscalefps); otherwise two exponent-bit
    multiplies, the first exact (y * 2**(n//2) stays normal), the second rounding once:
    the same bits, denormals included. x is clamped to [-104, 89], beyond which the scale itself gives
    0 or inf (2**128 is inf's bit pattern), so no selects are needed for the limits."""
    log2e, ln2_hi, ln2_lo = 1.44269504088896341, 0.693359375, -2.12194440e-4
    xc = b.call(_minmax(b, "llvm.minnum"), [x, _c(89.0)])
    xc = b.call(_minmax(b, "llvm.maxnum"), [xc, _c(-104.0)])
    n = b.call(_unary(b, "llvm.rint"), [b.fmul(xc, _c(log2e))])
    r = _fma(b, n, _c(-ln2_lo), _fma(b, n, _c(-ln2_hi), xc))
    y = _poly(b, r, [1 / 5040, 1 / 720, 1 / 120, 1 / 24, 1 / 6, 0.5, 1.0, 1.0])
    if scalef:
        y = b.call(_scalef(b), [y, n])
    else:
        ni = b.fptosi(n, I32)
        n1 = b.ashr(ni, _i(1))                  # n in [-150, 128]: halves in [-75, 64]
        y = b.fmul(b.fmul(y, _pow2(b, n1)), _pow2(b, b.sub(ni, n1)))
    return b.select(b.fcmp_unordered("uno", x, x), x, y)


def log_f32(b: ir.IRBuilder, x, scalef: bool = False):
    tiny = b.fcmp_ordered("<", x, _c(1.17549435e-38))
    xs = b.select(tiny, b.fmul(x, _c(8388608.0)), x)          # scale denormals by 2**23
    bits = b.bitcast(xs, I32)
    e = b.sub(b.and_(b.lshr(bits, _i(23)), _i(0xFF)), _i(126))
    e = b.select(tiny, b.sub(e, _i(23)), e)
    m = b.bitcast(b.or_(b.and_(bits, _i(0x807FFFFF)), _i(0x3F000000)), F32)   # [0.5, 1)
    small = b.fcmp_ordered("<", m, _c(0.707106781186547524))
    e = b.select(small, b.sub(e, _i(1)), e)
    m = b.select(small, b.fsub(b.fadd(m, m), _c(1.0)), b.fsub(m, _c(1.0)))
    ef = b.sitofp(e, F32)
    z = b.fmul(m, m)
    p = _poly(b, m, [7.0376836292e-2, -1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1,
                     1.4249322787e-1, -1.6668057665e-1, 2.0000714765e-1, -2.4999993993e-1,
                     3.3333331174e-1])
    y = b.fmul(b.fmul(p, m), z)
    y = b.fadd(y, b.fmul(ef, _c(-2.12194440e-4)))
    y = b.fadd(y, b.fmul(z, _c(-0.5)))
    y = b.fadd(b.fadd(m, y), b.fmul(ef, _c(0.693359375)))
    y = b.select(b.fcmp_ordered("==", x, _c(0.0)), _c(float("-inf")), y)
    y = b.select(b.fcmp_ordered("<", x, _c(0.0)), _c(float("nan")), y)
    y = b.select(b.fcmp_ordered("==", x, _c(float("inf"))), x, y)
    return b.select(b.fcmp_unordered("uno", x, x), x, y)


def tanh_f32(b: ir.IRBuilder, x, scalef: bool = False):
    ax = b.call(_unary(b, "llvm.fabs"), [x])
    z = b.fmul(x, x)
    p = _poly(b, z, [-5.70498872745e-3, 2.06390887954e-2, -5.37397155531e-2,
                     1.33314422036e-1, -3.33332819422e-1])
    small = b.fadd(b.fmul(b.fmul(p, z), x), x)
    e = exp_f32(b, b.fmul(ax, _c(2.0)), scalef)
    big = b.fsub(_c(1.0), b.fdiv(_c(2.0), b.fadd(e, _c(1.0))))
    big = b.call(_copysign(b), [big, x])
    y = b.select(b.fcmp_ordered("<", ax, _c(0.625)), small, big)
    return b.select(b.fcmp_unordered("uno", x, x), x, y)


def logistic_f32(b: ir.IRBuilder, x, scalef: bool = False):
    """1/(1+e) or e/(1+e) with e = exp(-|x|): one division either way, no overflow, and
    small results keep their precision down to the denormals. nan passes through exp."""
    ax = b.call(_unary(b, "llvm.fabs"), [x])
    e = exp_f32(b, b.fneg(ax), scalef)
    r = b.fdiv(_c(1.0), b.fadd(_c(1.0), e))
    return b.select(b.fcmp_ordered(">=", x, _c(0.0)), r, b.fmul(e, r))


def erf_f32(b: ir.IRBuilder, x, scalef: bool = False):
    """|x| < 0.5: odd Taylor polynomial (relative error < 1e-9); otherwise 1 - erfc(|x|)
    with erfc(z) = t*exp(-z*z + P(t)), t = 1/(1 + z/2) (a Chebyshev fit, relative error
    below 1.2e-7 in erfc: Numerical Recipes' erfcc), the sign restored."""
    ax = b.call(_unary(b, "llvm.fabs"), [x])
    z = b.fmul(x, x)
    # 2/sqrt(pi) * (x - x^3/3 + x^5/10 - x^7/42 + x^9/216 - x^11/1320 + x^13/9360)
    c = 1.1283791670955126
    taylor = _poly(b, z, [c / 9360, -c / 1320, c / 216, -c / 42, c / 10, -c / 3, c])
    small = b.fmul(taylor, x)
    t = b.fdiv(_c(1.0), _fma(b, ax, _c(0.5), _c(1.0)))
    p = _poly(b, t, [0.17087277, -0.82215223, 1.48851587, -1.13520398, 0.27886807,
                     -0.18628806, 0.09678418, 0.37409196, 1.00002368, -1.26551223])
    big = b.fsub(_c(1.0), b.fmul(t, exp_f32(b, b.fsub(p, z), scalef)))
    big = b.call(_copysign(b), [big, x])
    y = b.select(b.fcmp_ordered("<", ax, _c(0.5)), small, big)
    return b.select(b.fcmp_unordered("uno", x, x), x, y)


def _function(b, name, nargs):
    """float name(float, ...) of `nargs` arguments, declared once in b's module."""
    module = b.module
    if name in module.globals:
        return module.globals[name]
    return ir.Function(module, ir.FunctionType(F32, [F32] * nargs), name)


def _declare(b, name, nargs):
    return _function(b, name + ".f32", nargs)


def _unary(b, name):
    return _declare(b, name, 1)


def _minmax(b, name):
    return _declare(b, name, 2)


def _scalef(b):
    return _function(b, "graphc_scalef", 2)


def _copysign(b):
    return _declare(b, "llvm.copysign", 2)


VECTOR_F32 = {"exp": exp_f32, "log": log_f32, "tanh": tanh_f32, "logistic": logistic_f32,
              "erf": erf_f32}
