"""The optimized LLVM IR of graphc's own GEMM kernels (gemm.py), which every program that
calls one links in: built and optimized once per process, and kept in graphc's cache
folder (runtime/cache_store.py) for the next processes (0.06-0.18 s of LLVM work a
kernel, 0.37 s for the three a CNN uses)."""
from __future__ import annotations

import functools

import llvmlite.ir as ir

from graphc_runtime import cache_store

from . import amx
from .dot_plan import NATIVE_FORMS, native_kernel
from .gemm import PREFIX, GemmBuilder

_CACHE_KIND = cache_store.Kind(b"GRAPHC-GEMM-CACHE-1\n", ".gcg", compress=True)


@functools.cache
def optimized_ir(name: str, features: str, opt_level: int) -> str:
    """The LLVM IR of the own-GEMM function `name`, keyed in the cache by graphc's
    sources, the name, the host's features and CPU, the optimization level and LLVM."""
    from graphc_runtime.cpu import host_target_machine, llvm
    from graphc_runtime.host import llvm_identity

    from ..llvm import features as llvm_features
    b = llvm()
    key = cache_store.entry_name(_CACHE_KIND, cache_store.source_fingerprint(), name,
                                 features, str(opt_level), *llvm_identity())
    cached = cache_store.load(_CACHE_KIND, key)
    if cached is not None:
        try:
            return cached.decode()
        except UnicodeDecodeError:         # damaged: built again below and stored anew
            cache_store.remove(_CACHE_KIND, key)
    form, dtype = name[len(PREFIX):].split("_", 1)
    module = ir.Module(name)
    if form in NATIVE_FORMS:
        native_kernel(form).build(module).linkage = "external"
    else:
        GemmBuilder(module, features).function(form, dtype).linkage = "external"
    parsed = b.parse_assembly(str(module))
    if form == "amx":                   # the tile kernel, written as LLVM IR text
        parsed.link_in(b.parse_assembly(amx.BLOCK_IR))
    llvm_features.optimize(parsed, host_target_machine(opt_level), opt_level)
    text = str(parsed)
    cache_store.store(_CACHE_KIND, key, text.encode())
    return text
