"""What the installed LLVM does with the IR graphc emits, found by probing it once per
process (llvmlite releases pin different LLVMs: 0.45-0.47 have LLVM 20, 0.48+ LLVM 22)."""
from __future__ import annotations

import re

import llvmlite

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
