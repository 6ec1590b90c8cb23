"""The artifact file format: one file, a checksummed manifest and checksummed sections.

    8 bytes   magic b"GRAPHCAR"
    4 bytes   format version (little-endian u32)
    8 bytes   manifest length N (little-endian u64)
    N bytes   manifest (UTF-8 JSON)
    32 bytes  SHA-256 of the manifest
    ...       section data; the manifest gives each section's offset, length and SHA-256

Sections hold the native object code, the optimized graph (JSON), text dumps, and
variables and constants as raw little-endian arrays. No pickle. Files are written to a
temporary name and renamed, so a reader never sees half a file.
"""
from __future__ import annotations

import hashlib
import json
import os
import struct
import tempfile

from . import dims
from .errors import ArtifactError

MAGIC = b"GRAPHCAR"
FORMAT_VERSION = 2        # the newest this runtime reads and writes
SYMBOLIC_FORMAT = 2       # format 2: shapes and sizes may be symbolic ({"dim": terms});
                          # a program without symbolic dims is still written as format 1
_HEADER = struct.Struct("<8sIQ")


def write(path: str, manifest: dict, sections: dict) -> None:
    """Write `manifest` (JSON-able) and `sections` (name -> bytes) to `path` atomically."""
    table, offset = {}, 0
    for name, data in sections.items():
        table[name] = {"offset": offset, "length": len(data),
                       "sha256": hashlib.sha256(data).hexdigest()}
        offset += len(data)
    version = SYMBOLIC_FORMAT if (manifest.get("signature") or {}).get("symbols") else 1
    manifest = dict(manifest, format_version=version, sections=table)
    head = json.dumps(manifest, sort_keys=True, default=dims.json_default).encode()
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".gcx-", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(_HEADER.pack(MAGIC, version, len(head)))
            f.write(head)
            f.write(hashlib.sha256(head).digest())
            for data in sections.values():
                f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def read(path: str) -> tuple[dict, dict]:
    """(manifest, sections) of the artifact at `path`; ArtifactError if it is not a
    complete, intact graphc artifact of a format this runtime reads."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise ArtifactError(f"cannot read artifact {path!r}: {e.strerror}") from None
    return parse(data, path)


def parse(data: bytes, label: str = "artifact") -> tuple[dict, dict]:
    if len(data) < _HEADER.size:
        if not MAGIC.startswith(data[:8]):
            raise ArtifactError(f"{label}: not a graphc artifact (bad magic)")
        raise ArtifactError(f"{label}: truncated ({len(data)} bytes, the header alone needs "
                            f"{_HEADER.size})")
    magic, version, n = _HEADER.unpack_from(data)
    if magic != MAGIC:
        raise ArtifactError(f"{label}: not a graphc artifact (bad magic {magic!r})")
    if version > FORMAT_VERSION:
        raise ArtifactError(f"{label}: written in format version {version} by a newer graphc; "
                            f"this runtime reads format {FORMAT_VERSION}")
    if version < 1:
        raise ArtifactError(f"{label}: invalid format version {version}")
    start = _HEADER.size
    if n > len(data) - start - 32:
        raise ArtifactError(f"{label}: truncated (manifest of {n} bytes does not fit)")
    head = data[start:start + n]
    if hashlib.sha256(head).digest() != data[start + n:start + n + 32]:
        raise ArtifactError(f"{label}: manifest checksum mismatch: the file is corrupt or "
                            f"its manifest was edited")
    try:
        manifest = json.loads(head.decode(), object_hook=dims.json_object_hook)
    except (UnicodeDecodeError, ValueError) as e:
        raise ArtifactError(f"{label}: manifest is not valid JSON ({e})") from None
    if not isinstance(manifest, dict) or manifest.get("format_version") != version:
        raise ArtifactError(f"{label}: manifest does not match the header")
    base = start + n + 32
    sections = {}
    table = manifest.get("sections")
    if not isinstance(table, dict):
        raise ArtifactError(f"{label}: manifest has no section table")
    for name, rec in table.items():
        try:
            off, length, digest = int(rec["offset"]), int(rec["length"]), str(rec["sha256"])
        except (KeyError, TypeError, ValueError):
            raise ArtifactError(f"{label}: malformed entry for section {name!r}") from None
        if off < 0 or length < 0 or base + off + length > len(data):
            raise ArtifactError(f"{label}: truncated (section {name!r} ends past the end of "
                                f"the file)")
        blob = data[base + off:base + off + length]
        if hashlib.sha256(blob).hexdigest() != digest:
            raise ArtifactError(f"{label}: section {name!r} checksum mismatch: the file is "
                                f"corrupt")
        sections[name] = blob
    return manifest, sections
