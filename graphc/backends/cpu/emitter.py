"""The CPU's Emitter: the shared LLVM emitter with products through OpenBLAS or graphc's
own GEMM kernels (dots.py) and Winograd's convolutions (winograd.py)."""
from __future__ import annotations

from ..llvm.emitter import Emitter as LlvmEmitter
from .dots import CpuDotEmitter
from .winograd import WinogradEmitter


class Emitter(CpuDotEmitter, WinogradEmitter, LlvmEmitter):
    """Emits one kernel's loops and expressions into a function of the CPU's module."""
