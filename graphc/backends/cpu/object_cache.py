"""A persistent cache of compiled object code, in graphc's cache folder (cache_store.py).

LLVM's optimization and code generation are most of a compile (0.66 of 0.93 s for the
BERT-style benchmark model); their result depends only on the LLVM IR graphc emits and on
what compiles it. An entry is keyed by the sha256 of: this format's version, graphc's
sources (cache_store.source_fingerprint: the object holds the own GEMM kernels, which
the IR only declares, so an edited gemm.py must miss), llvmlite's and LLVM's versions,
the host's triple, CPU name and features, the optimization level and the IR text. So a
compile whose kernels, options and machine are the same reuses the object code (even
when its constants differ), and any difference misses. GRAPHC_CACHE=0 turns it off
(with the program cache).
"""
from __future__ import annotations

from graphc_runtime import cache_store

KIND = cache_store.Kind(b"GRAPHC-OBJECT-CACHE-2\n", ".gco", compress=True)


def enabled() -> bool:
    return cache_store.enabled()


def key(llvm_ir: str, opt_level: int, target: dict) -> str:
    """The entry's name: everything that decides the object code, hashed."""
    import llvmlite
    from graphc_runtime.cpu import llvm
    return cache_store.entry_name(KIND, cache_store.source_fingerprint(),
                                  llvmlite.__version__,
                                  ".".join(map(str, llvm().llvm_version_info)),
                                  target["triple"], target["cpu"], target["features"],
                                  str(int(opt_level)), llvm_ir)


def load(name: str):
    """(object code, optimized IR) of entry `name`, or None."""
    return unpack(cache_store.load(KIND, name))


def store(name: str, object_code: bytes, optimized_ir: str) -> None:
    cache_store.store(KIND, name, packed(object_code, optimized_ir))


def packed(object_code: bytes, optimized_ir: str) -> bytes:
    """An entry's payload: the object's size, the object, the IR text."""
    return len(object_code).to_bytes(8, "little") + bytes(object_code) + \
        optimized_ir.encode()


def unpack(body: "bytes | None"):
    """(object code, optimized IR) of a payload made by `packed`, or None."""
    if body is None or len(body) < 8:
        return None
    size = int.from_bytes(body[:8], "little")
    if size > len(body) - 8:
        return None
    try:
        return body[8:8 + size], body[8 + size:].decode()
    except UnicodeDecodeError:
        return None
