"""The CUDA backend: PTX through llvmlite's NVPTX target, run by graphc_runtime.cuda.

Its graph passes keep convolutions as products over patch matrices (its tiled products
take one contracting dimension) and decompose Winograd; its scheduling is the plain one
(no thread team, no scratch, no padded epilogues). Compiling needs no GPU.
"""
from __future__ import annotations

import time

from graphc_runtime.errors import CompileError

from ...passes.canonicalize_dots import canonicalize_dots
from ...passes.conv_to_gemm import conv_to_patches
from ..backend import Backend, Build, Built
from .emitter import PTX_FEATURES
from .program import PtxProgram


class CudaBackend(Backend):
    kind = "cuda"
    options = frozenset({"arch", "opt_level"})

    def __init__(self, index, options, loc=None):
        super().__init__(index, options, loc)
        self.arch = options.get("arch", "sm_80")
        if self.arch not in PTX_FEATURES:
            raise CompileError(f"unknown GPU architecture {self.arch!r}; known: "
                               f"{', '.join(PTX_FEATURES)}", loc)

    def lowering_passes(self) -> list:
        return [("conv_to_gemm", conv_to_patches), ("canonicalize_dots", canonicalize_dots)]

    def build(self, job: Build) -> Built:
        from graphc_runtime.cuda import CudaProgram
        t0 = time.perf_counter()
        ptx = PtxProgram(job.name, job.lowered, self.arch, self.opts.get("opt_level", 3))
        job.seconds["ptx"] = time.perf_counter() - t0
        lowered = job.lowered
        native = CudaProgram(ptx.ptx, ptx.arch, ptx.launches, job.signature,
                             lowered.memory.arena_bytes,
                             {name: job.graph.variables[name] for name in lowered.variables},
                             [c for _, c in lowered.constants])
        return Built(native, len(ptx.launches), {"ptx": ptx.ptx}, {"arch": ptx.arch},
                     {"ptx": ptx.ptx.encode()}, stats={"arch": ptx.arch},
                     manifest={"launches": ptx.launches})
