"""This machine's float32 FMA peak: `python -m bench.fma_peak`.

A loop of independent vector FMAs on registers (no memory traffic), compiled for the host
through llvmlite, run on one thread and on every core at once; what a product can reach
at best on this machine. The figure that puts a model's time in proportion: the
ResNet-style ONNX model is 4.62 GFLOP a call at batch 32, so on 2 cores that peak at
~230 GFLOP/s no direct convolution runs it in under ~20 ms.
"""
from __future__ import annotations

import argparse
import ctypes
import os
import threading
import time

import llvmlite.ir as ir

from graphc_runtime.cpu import host_features, host_target_machine, llvm

UNROLL = 4


def _kernel(width: int, accumulators: int):
    """float f(i64 n): n rounds of UNROLL dependent FMAs on each of `accumulators`
    independent <width x float> registers; returns a lane of their sum (so nothing is
    left out)."""
    f32, i64 = ir.FloatType(), ir.IntType(64)
    vt = ir.VectorType(f32, width)
    module = ir.Module("fma_peak")
    module.triple = llvm().get_default_triple()
    fma = ir.Function(module, ir.FunctionType(vt, [vt, vt, vt]), f"llvm.fma.v{width}f32")
    fn = ir.Function(module, ir.FunctionType(f32, [i64]), "fma_peak")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    loop, done = fn.append_basic_block("loop"), fn.append_basic_block("done")
    x, y = ir.Constant(vt, [1.0001] * width), ir.Constant(vt, [0.9999] * width)
    entry = b.block
    b.branch(loop)
    b.position_at_end(loop)
    i = b.phi(i64)
    i.add_incoming(ir.Constant(i64, 0), entry)
    accs = []
    for a in range(accumulators):
        p = b.phi(vt)
        p.add_incoming(ir.Constant(vt, [float(a)] * width), entry)
        accs.append(p)
    values = list(accs)
    for _ in range(UNROLL):
        values = [b.call(fma, [x, v, y]) for v in values]
    for p, v in zip(accs, values):
        p.add_incoming(v, loop)
    nxt = b.add(i, ir.Constant(i64, 1))
    i.add_incoming(nxt, loop)
    b.cbranch(b.icmp_signed("<", nxt, fn.args[0]), loop, done)
    b.position_at_end(done)
    total = values[0]
    for v in values[1:]:
        total = b.fadd(total, v)
    b.ret(b.extract_element(total, ir.Constant(ir.IntType(32), 0)))
    binding = llvm()
    engine = binding.create_mcjit_compiler(binding.parse_assembly(str(module)),
                                           host_target_machine(2))
    engine.finalize_object()
    call = ctypes.CFUNCTYPE(ctypes.c_float, ctypes.c_int64)(engine.get_function_address(
        "fma_peak"))
    return call, engine


def peak(width: int, accumulators: int = 16, rounds: int = 20_000_000,
         threads: int = 1) -> float:
    """GFLOP/s of `threads` copies of the loop at once (ctypes releases the GIL)."""
    call, _engine = _kernel(width, accumulators)
    call(1000)
    workers = [threading.Thread(target=call, args=(rounds,)) for _ in range(threads)]
    start = time.perf_counter()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    seconds = time.perf_counter() - start
    return threads * rounds * UNROLL * accumulators * width * 2 / seconds / 1e9


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=20_000_000)
    args = p.parse_args(argv)
    cores = os.cpu_count() or 1
    widths = [16, 8] if "+avx512f" in host_features().split(",") else [8]
    for width in widths:
        one = peak(width, rounds=args.rounds)
        alls = max(peak(width, rounds=args.rounds, threads=cores) for _ in range(3))
        print(f"<{width} x float> FMAs: 1 thread {one:.0f} GFLOP/s, {cores} threads "
              f"{alls:.0f} GFLOP/s")


if __name__ == "__main__":
    main()
