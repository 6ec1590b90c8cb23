"""A program's LLVM IR optimized and compiled to object code for the host.

A large program is cut into parts (module_parts.py) compiled by several processes at once
(llvm_workers.py), graphc's own GEMM kernels it calls making one more part; the objects
are packed into one blob (graphc_runtime.objects) that the runtime loads as one program.
Either way the result is kept in the persistent object cache (object_cache.py), keyed
by the whole IR.
"""
from __future__ import annotations

import re

from graphc_runtime import objects
from graphc_runtime.errors import CompileError

from ..llvm import features as llvm_features
from . import gemm, gemm_ir, llvm_workers, module_parts, object_cache, scalef

GEMM_DECLARED = re.compile(r'^declare [^@]*@"(' + gemm.PREFIX + r'[^"]+)"\(', re.M)


class NativeModule:
    """An optimized LLVM module for the host and its object code, taken from the
    persistent object cache when the same IR was compiled before for this machine:
    `cache` says 'hit', 'miss' or 'off'; `parts` how many objects the code has."""

    def __init__(self, llvm_ir: str, opt_level: int = 3):
        from graphc_runtime.cpu import host_features, host_target_machine, llvm
        b = llvm()
        self.triple = b.get_process_triple()
        self.cpu = b.get_host_cpu_name()
        self.features = host_features()
        self.target_machine = host_target_machine(opt_level)
        self.opt_level = opt_level
        self._whole = llvm_ir
        self._jobs = None
        self._module = None
        self._asm = None
        name = object_cache.key(llvm_ir, opt_level, {"triple": self.triple, "cpu": self.cpu,
                                                     "features": self.features}) \
            if object_cache.enabled() else None
        cached = object_cache.load(name) if name else None
        if cached is not None:
            self.object_code, self.optimized_ir = cached
            self.cache = "hit"
            self.parts = len(objects.unpack(self.object_code))
            return
        n = llvm_workers.processes()
        parts = module_parts.split(llvm_ir) if n > 1 else None
        if parts is None:
            self.object_code, self.optimized_ir = compile_job(("whole", llvm_ir, opt_level))
            self.parts = 1
        else:
            self._jobs = part_jobs(llvm_ir, parts, opt_level)
            order = sorted(range(len(self._jobs)), key=lambda k: -_cost(self._jobs[k]))
            done = llvm_workers.run([self._jobs[k] for k in order], compile_job, n)
            results = dict(zip(order, done))
            self.object_code = objects.pack([results[k][0] for k in range(len(self._jobs))])
            self.optimized_ir = "\n".join(f"; part {k}\n{results[k][1]}"
                                          for k in range(len(self._jobs)))
            self.parts = len(self._jobs)
        self.cache = "miss" if name else "off"
        if name:
            object_cache.store(name, self.object_code, self.optimized_ir)

    def modules(self) -> list:
        """The optimized module of each part, built from its IR by the same steps as for
        the object code: emitting an object rewrites its module (code generation's own
        IR passes), and a second emission from it, or from the optimized text parsed
        back, chose other registers than the object code has."""
        if self._module is None:
            jobs = self._jobs
            if jobs is None:
                jobs = [("whole", self._whole, self.opt_level)]
                parts = module_parts.split(self._whole) if self.parts > 1 else None
                if parts is not None:    # a cache hit compiled in parts: the same parts
                    jobs = part_jobs(self._whole, parts, self.opt_level)
            self._module = [build(job, self.target_machine) for job in jobs]
        return self._module

    def assembly(self) -> str:
        if self._asm is None:
            self._asm = "\n".join(self.target_machine.emit_assembly(m)
                                  for m in self.modules())
        return self._asm


def part_jobs(llvm_ir: str, parts: list, opt_level: int) -> list:
    """The jobs of a program cut into `parts`: each part, then the own GEMM kernels it
    calls (one job)."""
    jobs = [("part", text, opt_level) for text in parts]
    linked = sorted(set(GEMM_DECLARED.findall(llvm_ir)))
    return jobs + ([("gemm", "\n".join(linked), opt_level)] if linked else [])


def compile_job(job) -> tuple:
    """(object code, optimized IR text) of one job (see build)."""
    from graphc_runtime.cpu import host_target_machine
    target_machine = host_target_machine(job[2])
    module = build(job, target_machine)
    return bytes(target_machine.emit_object(module)), str(module)


def build(job, target_machine):
    """The optimized llvmlite module of a job: ("whole", IR, opt level) links the own
    GEMM kernels it calls into it; ("part", IR, opt level) leaves them declared;
    ("gemm", their names one a line, opt level) is those kernels alone; `target_machine`
    is the host's at that level."""
    from graphc_runtime.cpu import host_features, llvm
    b = llvm()
    kind, text, opt_level = job
    if kind == "gemm":
        module = b.parse_assembly("")
        module.triple = b.get_process_triple()
        for name in text.split("\n"):
            module.link_in(b.parse_assembly(gemm_ir.optimized_ir(name, host_features(),
                                                                  opt_level)))
        return module
    try:
        module = b.parse_assembly(text)
        module.verify()
    except RuntimeError as e:
        raise CompileError(f"generated LLVM IR is invalid: {e}") from None
    linked = scalef.link(module)
    llvm_features.optimize(module, target_machine, opt_level)
    if linked:
        scalef.inline_variants(module, target_machine)
    if kind == "whole":
        for fn in list(module.functions):    # graphc's own GEMM kernels, optimized once
            if fn.is_declaration and fn.name.startswith(gemm.PREFIX):
                module.link_in(b.parse_assembly(
                    gemm_ir.optimized_ir(fn.name, host_features(), opt_level)))
    return module


def _cost(job) -> int:
    """About how much LLVM work a job is (lines of IR; a GEMM kernel ~1,500 lines)."""
    kind, text, _ = job
    return 1500 * (text.count("\n") + 1) if kind == "gemm" else text.count("\n")
