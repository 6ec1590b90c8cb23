"""What the installed LLVM does with the IR graphc emits, found by probing it once per
process (llvmlite releases pin different LLVMs: 0.45-0.47 have LLVM 20, 0.48+ LLVM 22)."""
from __future__ import annotations

import functools
import re

import llvmlite
import llvmlite.ir as ir

F32, I32, I64 = ir.FloatType(), ir.IntType(32), ir.IntType(64)

OLDEST_LLVMLITE = (0, 45)      # keep in step with pyproject.toml


def llvmlite_version(text: str = llvmlite.__version__) -> tuple:
    """(major, minor) of an llvmlite version string such as '0.47.0dev0'."""
    match = re.match(r"(\d+)\.(\d+)", text)
    return (int(match.group(1)), int(match.group(2))) if match else (0, 0)


def require_supported_llvmlite(text: str = llvmlite.__version__) -> None:
    """ImportError naming the fix when the installed llvmlite is older than graphc needs:
    before 0.44 it has no pass-builder API, and 0.44's LLVM 15 aborts the process when it
    meets the NaN-propagating max/min (llvm.maximum) that graphc's reductions use."""
    if llvmlite_version(text) < OLDEST_LLVMLITE:
        raise ImportError(
            f"graphc needs llvmlite >= {'.'.join(map(str, OLDEST_LLVMLITE))} (LLVM 20 or "
            f"newer); this environment has llvmlite {text}. Upgrade it with: "
            f"pip install 'llvmlite>={'.'.join(map(str, OLDEST_LLVMLITE))}'")


def versions() -> dict:
    """llvmlite's and its LLVM's versions, for reports and benchmarks."""
    from graphc_runtime.cpu import llvm
    return {"llvmlite": llvmlite.__version__,
            "llvm": ".".join(map(str, llvm().llvm_version_info))}


def optimize(module, target_machine, opt_level: int) -> None:
    """Run LLVM's default pipeline at `opt_level` with both vectorizers on `module`."""
    if opt_level <= 0:
        return
    from graphc_runtime.cpu import llvm
    b = llvm()
    pto = b.create_pipeline_tuning_options(speed_level=min(opt_level, 3))
    pto.loop_vectorization = True
    pto.slp_vectorization = True
    pb = b.create_pass_builder(target_machine, pto)
    pb.getModulePassManager().run(module, pb)


@functools.cache
def vectorizes_ldexp() -> bool:
    """Does the loop vectorizer widen a loop that calls llvm.ldexp? LLVM 22 does (one
    vscalefps a vector on AVX-512); LLVM 20 leaves the whole loop scalar, about 9x slower
    for exp-heavy kernels, so graphc then scales by exponent bits instead."""
    from graphc_runtime.cpu import host_target_machine, llvm
    b = llvm()
    module = ir.Module("probe_ldexp")
    module.triple = b.get_process_triple()
    ptr = ir.PointerType(F32)
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [ptr, ptr]), "probe")
    for arg in fn.args:
        arg.add_attribute("noalias")
    ldexp = ir.Function(module, ir.FunctionType(F32, [F32, I32]), "llvm.ldexp.f32.i32")
    entry, loop, done = (fn.append_basic_block(n) for n in ("entry", "loop", "done"))
    builder = ir.IRBuilder(entry)
    builder.branch(loop)
    builder.position_at_end(loop)
    i = builder.phi(I64)
    i.add_incoming(ir.Constant(I64, 0), entry)
    x = builder.load(builder.gep(fn.args[0], [i], inbounds=True))
    n = builder.fptosi(x, I32)
    builder.store(builder.call(ldexp, [x, n]), builder.gep(fn.args[1], [i], inbounds=True))
    step = builder.add(i, ir.Constant(I64, 1))
    i.add_incoming(step, loop)
    builder.cbranch(builder.icmp_unsigned("<", step, ir.Constant(I64, 1024)), loop, done)
    builder.position_at_end(done)
    builder.ret_void()
    parsed = b.parse_assembly(str(module))
    optimize(parsed, host_target_machine(3), 3)
    return "x float>" in str(parsed)
