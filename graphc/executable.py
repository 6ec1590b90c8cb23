"""Executable: a compiled program, callable like a function."""
from __future__ import annotations

from graphc_runtime.errors import CompileError

STAGES = ("graph", "optimized", "fused", "memory", "llvm", "asm", "ptx")


class Executable:
    """`exe(*inputs, **inputs)` runs one step and returns the outputs' structure."""

    def __init__(self, native, rebuild, stats: dict, dumps: dict, device: str):
        self._native = native
        self._rebuild = rebuild
        self.stats = stats
        self._dumps = dumps
        self.device = device

    def __call__(self, *args, **kwargs):
        return self._rebuild(self._native.run(args, kwargs))

    @property
    def variables(self) -> dict:
        """Current values of the variables (live arrays; updated in place by each call)."""
        return self._native.variables

    @property
    def input_names(self) -> list:
        return [e[0] for e in self._native.signature.inputs]

    def dump(self, stage: str = "optimized") -> str:
        """Text of one compilation stage: graph, optimized, fused, memory, llvm, asm, ptx."""
        if stage not in STAGES:
            raise CompileError(f"unknown stage {stage!r}; stages: {', '.join(STAGES)}")
        if stage == "ptx":
            raise CompileError(f"no PTX: this executable was compiled for {self.device}")
        if stage == "asm":
            return self._native.assembly()
        if stage == "llvm":
            return self._native.optimized_ir
        return self._dumps[stage]
