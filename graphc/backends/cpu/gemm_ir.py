"""graphc's own GEMM kernels (gemm.py) compiled on their own: optimized LLVM IR and an
object of their own, which every program that calls one loads beside its parts. Each
is built once per process and kept in graphc's cache folder (runtime/cache_store.py)
for the next processes (0.1-0.2 s of LLVM work a kernel, 0.57 s for the three a CNN
uses)."""
from __future__ import annotations

import llvmlite.ir as ir

from graphc_runtime import cache_store

from . import amx, object_cache
from .dot_plan import NATIVE_FORMS, native_kernel
from .gemm import PREFIX, GemmBuilder

_CACHE_KIND = cache_store.Kind(b"GRAPHC-GEMM-CACHE-2\n", ".gcg", compress=True)
_COMPILED: dict = {}        # (name, features, opt level) -> (object code, optimized IR)


def compiled(name: str, features: str, opt_level: int) -> tuple:
    """(object code, optimized IR) of the own-GEMM function `name` alone, the object
    emitted from the optimized IR parsed back (as NativeModule.modules() builds it for
    assembly); keyed in the cache by graphc's sources, the name, the host's features
    and CPU, the optimization level and LLVM."""
    from graphc_runtime.cpu import host_target_machine, llvm
    from graphc_runtime.host import llvm_identity
    known_result = _COMPILED.get((name, features, opt_level))
    if known_result is not None:
        return known_result
    b = llvm()
    key = cache_store.entry_name(_CACHE_KIND, cache_store.source_fingerprint(), name,
                                 features, str(opt_level), *llvm_identity())
    result = object_cache.unpack(cache_store.load(_CACHE_KIND, key))
    if result is None:
        text = _optimized_ir(name, features, opt_level)
        module = b.parse_assembly(text)
        module.triple = b.get_process_triple()
        result = bytes(host_target_machine(opt_level).emit_object(module)), text
        cache_store.store(_CACHE_KIND, key, object_cache.packed(*result))
    return remember(name, features, opt_level, result)


def remember(name: str, features: str, opt_level: int, result: tuple) -> tuple:
    """Keep a kernel's (object code, optimized IR) for this process (one a worker
    process compiled)."""
    _COMPILED[(name, features, opt_level)] = result
    return result


def known(name: str, features: str, opt_level: int) -> bool:
    """Whether this process has the kernel's object code already."""
    return (name, features, opt_level) in _COMPILED


def _optimized_ir(name: str, features: str, opt_level: int) -> str:
    from graphc_runtime.cpu import host_target_machine, llvm

    from ..llvm import features as llvm_features
    b = llvm()
    form, dtype = name[len(PREFIX):].split("_", 1)
    module = ir.Module(name)
    if form in NATIVE_FORMS:
        native_kernel(form).build(module).linkage = "external"
    else:
        GemmBuilder(module, features).function(form, dtype).linkage = "external"
    parsed = b.parse_assembly(str(module))
    if form == "amx":                   # the tile kernel, written as LLVM IR text
        parsed.link_in(b.parse_assembly(amx.BLOCK_IR))
    elif form.startswith("amxi8"):
        parsed.link_in(b.parse_assembly(native_kernel(form).block_ir()))
    llvm_features.optimize(parsed, host_target_machine(opt_level), opt_level)
    return str(parsed)
