"""A program's native code as one blob: a single object file as it is, or several
(a large program compiled in parts, one object each) behind a small table:

    MAGIC, u32 count, count x u64 sizes, the objects one after another

All little-endian. The runtime loads every object into one engine, which links their
calls to each other by name.
"""
from __future__ import annotations

import struct

from .errors import CompileError

MAGIC = b"GRAPHC-OBJECTS-1\n"


def pack(objects: list) -> bytes:
    """One blob for `objects` (a lone object file stays as it is)."""
    if len(objects) == 1:
        return bytes(objects[0])
    return b"".join([MAGIC, struct.pack(f"<I{len(objects)}Q", len(objects),
                                        *(len(o) for o in objects)), *map(bytes, objects)])


def unpack(blob: bytes) -> list:
    """The object files in `blob`; CompileError where its table does not fit it."""
    if not blob.startswith(MAGIC):
        return [blob]
    at = len(MAGIC)
    if len(blob) < at + 4:
        raise CompileError("native code: truncated object table")
    (count,) = struct.unpack_from("<I", blob, at)
    at += 4
    if count < 1 or len(blob) < at + 8 * count:
        raise CompileError(f"native code: object table of {count} entries does not fit "
                           f"its {len(blob)} bytes")
    sizes = struct.unpack_from(f"<{count}Q", blob, at)
    at += 8 * count
    if at + sum(sizes) != len(blob):
        raise CompileError(f"native code: the objects' sizes add up to {sum(sizes)} bytes, "
                           f"the blob holds {len(blob) - at}")
    out = []
    for size in sizes:
        out.append(blob[at:at + size])
        at += size
    return out
