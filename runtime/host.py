"""LLVM for this machine: llvmlite's binding initialized once, and target machines with
every feature of the host CPU."""
from __future__ import annotations

import sys
import threading

from . import forks

_llvm_ready = False
_llvm_lock = threading.Lock()


forks.guard_module_lock(sys.modules[__name__], "_llvm_lock")


def llvm():
    """llvmlite.binding, initialized once for the native target."""
    global _llvm_ready
    import llvmlite.binding as binding
    with _llvm_lock:
        if not _llvm_ready:
            binding.initialize_native_target()
            binding.initialize_native_asmprinter()
            _llvm_ready = True
    return binding


def host_target_machine(opt: int = 3):
    """A target machine for this CPU with all of its features."""
    b = llvm()
    target = b.Target.from_default_triple()
    return target.create_target_machine(cpu=b.get_host_cpu_name(),
                                        features=_features(b),
                                        opt=opt, reloc="default", codemodel="jitdefault")


def host_features() -> str:
    return _features(llvm())


def llvm_identity() -> tuple:
    """What decides the code LLVM makes here, for cache keys: the host's triple, CPU
    name and features, llvmlite's and LLVM's versions."""
    import llvmlite
    b = llvm()
    return (b.get_process_triple(), b.get_host_cpu_name(), _features(b),
            llvmlite.__version__, ".".join(map(str, b.llvm_version_info)))


def _features(b) -> str:
    """Host CPU features; with AVX-512, let the vectorizer use the full 512-bit width."""
    features = b.get_host_cpu_features().flatten()
    if "+avx512f" in features.split(","):
        features += ",-prefer-256-bit"
    return features
