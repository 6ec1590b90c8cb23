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


_amx = None


def amx_usable() -> bool:
    """Whether this process may run AMX tile code: Linux on x86-64 grants a process the
    tiles' register state when asked (arch_prctl ARCH_REQ_XCOMP_PERM for XTILEDATA;
    code that uses tiles without it is killed by SIGILL). Asked once per process, here;
    GRAPHC_AMX=0 says no without asking. The caller checks the CPU's features."""
    global _amx
    if _amx is None:
        _amx = _request_amx()
    return _amx


AMX_SYMBOL = b"graphc_amx_block"    # in object code that uses tiles (backends/cpu/amx.py;
# amx_int8.py's blocks are named with it as their prefix)


def grant_amx(object_code: bytes) -> None:
    """Before loading object code that uses AMX tiles, ask for them (whatever GRAPHC_AMX
    says: the code was compiled for them); a refusal is an error, not a SIGILL later."""
    global _amx
    if AMX_SYMBOL in object_code and not _amx:
        _amx = _request_amx(ask=True)
        if not _amx:
            from .errors import CompileError
            raise CompileError("this code uses AMX tiles (bfloat16 or 8-bit products), "
                               "which this process may not use (no amx-tile, or the "
                               "kernel refused)")


def _request_amx(ask: bool = False) -> bool:
    import os
    import platform
    if not ask and os.environ.get("GRAPHC_AMX", "1").strip().lower() in (
            "0", "false", "no", "off"):
        return False
    if sys.platform != "linux" or platform.machine() not in ("x86_64", "AMD64"):
        return False
    import ctypes
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        sys_arch_prctl, req_xcomp_perm, xfeature_xtiledata = 158, 0x1023, 18
        return libc.syscall(sys_arch_prctl, req_xcomp_perm, xfeature_xtiledata) == 0
    except (OSError, AttributeError):
        return False
