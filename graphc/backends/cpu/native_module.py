"""A program's LLVM IR optimized and compiled to object code for the host.

A large program is cut into parts (module_parts.py) compiled by several processes at once
(llvm_workers.py); each of graphc's own GEMM kernels it calls is one more object, kept
for the process and in the cache (gemm_ir.compiled). The objects are packed into one
blob (graphc_runtime.objects) that the runtime loads as one program. Either way the
result is kept in the persistent object cache (object_cache.py), keyed by the whole IR.
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
    `cache` says 'hit', 'miss' or 'off'; `parts` how many objects the code has.
    `prefetched` is a llvm_workers.Background that may hold some of the jobs (the own
    GEMM kernels, started while the IR was being written)."""

    def __init__(self, llvm_ir: str, opt_level: int = 3, prefetched=None):
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
        jobs = self._jobs = program_jobs(llvm_ir, module_parts.split(llvm_ir)
                                         if n > 1 else None, opt_level)
        elsewhere = set(prefetched.jobs) if prefetched is not None else set()
        here = [k for k, job in enumerate(jobs) if job not in elsewhere and
                not (job[0] == "gemm" and gemm_ir.known(job[1], self.features, opt_level))]
        here.sort(key=lambda k: -_cost(jobs[k]))
        results = dict(zip(here, llvm_workers.run([jobs[k] for k in here], compile_job, n)))
        taken = prefetched.results() if prefetched is not None else {}
        for k, job in enumerate(jobs):
            if k not in results:
                results[k] = taken.get(job) or compile_job(job)
            if job[0] == "gemm":
                gemm_ir.remember(job[1], self.features, opt_level, results[k])
        self.object_code = objects.pack([results[k][0] for k in range(len(jobs))])
        self.optimized_ir = "\n".join(f"; part {k}\n{results[k][1]}" for k in range(len(jobs)))
        self.parts = len(jobs)
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
            if jobs is None:               # a cache hit: the parts its objects came from
                parts = module_parts.split(self._whole)
                jobs = program_jobs(self._whole, parts, self.opt_level)
                if parts is not None and len(jobs) != self.parts:
                    jobs = program_jobs(self._whole, None, self.opt_level)
            self._module = [build(job, self.target_machine) for job in jobs]
        return self._module

    def assembly(self) -> str:
        if self._asm is None:
            self._asm = "\n".join(self.target_machine.emit_assembly(m)
                                  for m in self.modules())
        return self._asm


def program_jobs(llvm_ir: str, parts: "list | None", opt_level: int) -> list:
    """The jobs of a program, whole or cut into `parts`: each part, then each own GEMM
    kernel it calls."""
    jobs = [("part", text, opt_level) for text in (parts or [llvm_ir])]
    return jobs + [("gemm", name, opt_level)
                   for name in sorted(set(GEMM_DECLARED.findall(llvm_ir)))]


def compile_job(job) -> tuple:
    """(object code, optimized IR text) of one job (see build)."""
    from graphc_runtime.cpu import host_features, host_target_machine
    if job[0] == "gemm":
        return gemm_ir.compiled(job[1], host_features(), job[2])
    target_machine = host_target_machine(job[2])
    module = build(job, target_machine)
    return bytes(target_machine.emit_object(module)), str(module)


def build(job, target_machine):
    """The optimized llvmlite module of a job: ("part", IR, opt level) with the own GEMM
    kernels it calls left declared, or ("gemm", a kernel's name, opt level), that kernel
    alone; `target_machine` is the host's at that level."""
    from graphc_runtime.cpu import host_features, llvm
    b = llvm()
    kind, text, opt_level = job
    if kind == "gemm":
        module = b.parse_assembly(gemm_ir.compiled(text, host_features(), opt_level)[1])
        module.triple = b.get_process_triple()
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
    return module


def _cost(job) -> int:
    """About how much LLVM work a job is (lines of IR; a GEMM kernel ~1,500 lines)."""
    kind, text, _ = job
    return 1500 if kind == "gemm" else text.count("\n")
