"""The CPU backend: LLVM IR for the host through llvmlite, run by graphc_runtime.cpu.

Its graph passes turn convolutions into products that read their input in place (or
Winograd's algorithm) and column sums into products with a ones vector, for its GEMM
kernels and OpenBLAS; its scheduling runs kernels on a thread team (a dot kernel's
epilogue may write padded or rearranged copies of its product, kept in the kernel's own
scratch; small loop kernels run in the previous kernel's chunks).
"""
from __future__ import annotations

import os
import time

from graphc_runtime.cpu import CpuProgram, host_features
from graphc_runtime.cpus import usable_cpus
from graphc_runtime.errors import CompileError, DeviceError

from ...kernels import kernel as K
from ...passes.canonicalize_dots import canonicalize_dots
from ...passes.column_sums import column_sums
from ...passes.conv_to_gemm import conv_to_gemm
from ...passes.low_precision_products import low_precision_products
from ...passes.sink_reshapes import sink_reshapes
from ...schedule.policy import SchedulePolicy
from ..backend import Backend, Build, Built
from .dot_plan import native_bf16, scratch_buffers
from .parallel import layout_split


def _threads_fit(kernel, threads: int) -> bool:
    """A dot kernel with layout nests runs whole images per thread, or shares each image
    between threads by rows where its nests allow (parallel.layout_split)."""
    if not getattr(kernel, "layouts", None) or threads < 2:
        return True
    return layout_split(kernel, threads) is not None


class CpuBackend(Backend):
    kind = "cpu"
    options = frozenset({"num_threads", "opt_level"})

    def __init__(self, index, options, loc=None):
        if index not in (None, 0):
            raise DeviceError(f"unknown device 'cpu:{index}'; the CPU is 'cpu' (or 'cpu:0')",
                              loc)
        super().__init__(None, options, loc)
        self.threads = self._threads()
        self.opt_level = options.get("opt_level", 3)

    def _threads(self) -> int:
        n = self.opts.get("num_threads")
        if n is None:
            env = os.environ.get("GRAPHC_NUM_THREADS", "")
            try:
                n = int(env) if env else usable_cpus()
            except ValueError:
                raise CompileError(f"GRAPHC_NUM_THREADS must be a positive int, got {env!r}",
                                   self.loc) from None
            distributed = self.opts.get("distributed")
            if not env and distributed is not None and getattr(distributed, "world", 1) > 1:
                # processes on one machine share its cores (graphc's threads and BLAS's)
                from graphc_runtime import blas, collectives
                n = max(1, n // collectives.local_size())
                blas.set_threads(n)
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise CompileError(f"num_threads must be a positive int, got {n!r}", self.loc)
        return n

    def lowering_passes(self) -> list:
        native = native_bf16(host_features()) is not None   # bfloat16 products: kept
        return [("low_precision_products", lambda p: low_precision_products(p, native)),
                ("conv_to_gemm", conv_to_gemm), ("canonicalize_dots", canonicalize_dots),
                ("sink_reshapes", sink_reshapes), ("column_sums", column_sums)]

    def policy(self) -> SchedulePolicy:
        return SchedulePolicy(threads=self.threads, rearranged_epilogues=True,
                              threads_fit=_threads_fit, scratch_of=scratch_buffers,
                              chaining=True, fuse=self.opts.get("fuse", True))

    def build(self, job: Build) -> Built:
        # the code generator is imported by the first build (a program cache hit has none)
        from . import module as codegen
        from .native_module import NativeModule
        lowered, threads, level = job.lowered, self.threads, self.opt_level
        prefetch = own_gemm_prefetch(level)
        try:
            t0 = time.perf_counter()
            llvm_ir = codegen.emit_module(job.name, lowered, threads,
                                          on_own_gemm=prefetch and prefetch.on_own_gemm)
            job.seconds["codegen"] = time.perf_counter() - t0
            t0 = time.perf_counter()
            module = NativeModule(llvm_ir, level, prefetch and prefetch.worker)
            job.seconds["llvm"] = time.perf_counter() - t0
        finally:
            if prefetch is not None:
                prefetch.worker.close()
        collectives = collective_steps(lowered)
        native = CpuProgram(module.object_code, job.signature, lowered.memory.arena_bytes,
                            {name: job.graph.variables[name] for name in lowered.variables},
                            [c for _, c in lowered.constants], collectives)
        chained = codegen.chain_plan(lowered.kernels, threads, lowered.memory.offsets)
        pairs = [(lowered.kernels[t].name, lowered.kernels[t + 1].name)
                 for t in sorted(chained)]
        return Built(native, len(lowered.kernels), {"llvm": module.optimized_ir},
                     {"triple": module.triple, "cpu": module.cpu, "features": module.features},
                     {"object": bytes(module.object_code)},
                     stats={"num_threads": threads, "chained_kernels": pairs,
                            "object_cache": module.cache, "llvm_parts": module.parts},
                     manifest={"collectives": collectives}, module=module,
                     profile_object=lambda: NativeModule(codegen.emit_module(
                         job.name, lowered, threads, profile=True), level).object_code)


def own_gemm_prefetch(opt_level: int):
    """A GemmPrefetch, or None where only one process compiles (GRAPHC_COMPILE_PROCESSES=1,
    one CPU)."""
    from . import llvm_workers
    return GemmPrefetch(opt_level) if llvm_workers.processes() > 1 else None


class GemmPrefetch:
    """The own GEMM kernels a program calls, compiled by a child process from the moment
    code generation first emits a call to each (the other CPU is idle meanwhile); those
    this process compiled before are not asked for."""

    def __init__(self, opt_level: int):
        from . import llvm_workers
        from .native_module import compile_job
        self.features, self.opt_level = host_features(), opt_level
        self.worker = llvm_workers.Background(compile_job)

    def on_own_gemm(self, name: str) -> None:
        from . import gemm_ir
        if not gemm_ir.known(name, self.features, self.opt_level):
            self.worker.submit(("gemm", name, self.opt_level))


def collective_steps(lowered) -> list:
    """The collectives between native segments, with where their buffers live (a table
    slot for inputs/outputs/variables/constants, an arena offset for temporaries)."""
    def where(buf):
        if buf.kind == "temp":
            return {"offset": lowered.memory.offsets[buf.id]}
        return {"slot": lowered.slots[buf.id]}
    steps = []
    for kern in lowered.kernels:
        if isinstance(kern, K.CollectiveKernel):
            steps.append({"op": kern.op, "attrs": {k: v for k, v in kern.attrs.items()},
                          "src": dict(where(kern.src), shape=list(kern.src.shape),
                                      dtype=kern.src.dtype),
                          "dst": dict(where(kern.dst), shape=list(kern.dst.shape),
                                      dtype=kern.dst.dtype)})
    return steps
