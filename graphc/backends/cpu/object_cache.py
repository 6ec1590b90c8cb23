"""A persistent cache of compiled object code, shared by the processes of one user.

LLVM's optimization and code generation are most of a compile (0.66 of 0.93 s for the
BERT-style benchmark model); their result depends only on the LLVM IR graphc emits and on
what compiles it. An entry is keyed by the sha256 of: this format's version, graphc's,
llvmlite's and LLVM's versions, the host's triple, CPU name and features, the
optimization level and the IR text. So a compile whose graph, options and machine are
the same reuses the object code, and any difference misses.

Settings (environment): GRAPHC_CACHE=0 turns it off; GRAPHC_CACHE_DIR chooses the folder
(default $XDG_CACHE_HOME/graphc, else ~/.cache/graphc); GRAPHC_CACHE_MAX_BYTES bounds its
size (default 1 GiB; the least recently used entries go first).

Entries are never trusted: each file holds its key and the sha256 of its payload, is
read only if this user owns it and nobody else may write it (nor its folder), and is
dropped and rebuilt when anything does not match. Writes go to a temporary file renamed
into place, so concurrent processes see a whole entry or none. A cache that cannot be
used (a read-only home, a full disk) is skipped without error.
"""
from __future__ import annotations

import hashlib
import os
import stat
import tempfile
import zlib

MAGIC = b"GRAPHC-OBJECT-CACHE-1\n"
DEFAULT_MAX_BYTES = 1 << 30
SUFFIX = ".gco"


def enabled() -> bool:
    return os.environ.get("GRAPHC_CACHE", "1").strip().lower() not in ("0", "false", "no",
                                                                         "off", "")


def folder() -> str:
    explicit = os.environ.get("GRAPHC_CACHE_DIR")
    if explicit:
        return explicit
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "graphc")


def max_bytes() -> int:
    try:
        return max(0, int(os.environ.get("GRAPHC_CACHE_MAX_BYTES", DEFAULT_MAX_BYTES)))
    except ValueError:
        return DEFAULT_MAX_BYTES


def key(llvm_ir: str, opt_level: int, target: dict) -> str:
    """The entry's name: everything that decides the object code, hashed."""
    import llvmlite
    from graphc_runtime import __version__
    from graphc_runtime.cpu import llvm
    h = hashlib.sha256()
    for part in (MAGIC.decode(), __version__, llvmlite.__version__,
                 ".".join(map(str, llvm().llvm_version_info)), target["triple"],
                 target["cpu"], target["features"], str(int(opt_level))):
        h.update(part.encode() + b"\0")
    h.update(llvm_ir.encode())
    return h.hexdigest()


def _private(path: str, st=None) -> bool:
    """Owned by this user and writable by nobody else."""
    st = st or os.stat(path)
    return st.st_uid == os.getuid() and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def load(name: str):
    """(object code, optimized IR) of entry `name`, or None (missing, corrupt, foreign,
    not private: a bad entry is removed)."""
    if not enabled():
        return None
    where = folder()
    path = os.path.join(where, name + SUFFIX)
    try:
        if not _private(where):
            return None
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    try:
        with os.fdopen(fd, "rb") as f:
            if not _private(path, os.fstat(f.fileno())):
                return None
            raw = f.read()
        entry = _decode(raw, name)
    except (OSError, ValueError, zlib.error):
        entry = None
    if entry is None:
        _remove(path)
        return None
    try:
        os.utime(path)                     # recently used: evicted last
    except OSError:
        pass
    return entry


def _decode(raw: bytes, name: str):
    head = len(MAGIC)
    if raw[:head] != MAGIC or len(raw) < head + 64 + 32:
        return None
    if raw[head:head + 64] != name.encode():            # an entry renamed from elsewhere
        return None
    digest, payload = raw[head + 64:head + 96], raw[head + 96:]
    if hashlib.sha256(payload).digest() != digest:
        return None
    body = zlib.decompress(payload)
    size = int.from_bytes(body[:8], "little")
    if size > len(body) - 8:
        return None
    return body[8:8 + size], body[8 + size:].decode()


def store(name: str, object_code: bytes, optimized_ir: str) -> None:
    """Write entry `name` (atomically), then keep the folder under its size bound."""
    if not enabled():
        return
    where = folder()
    try:
        os.makedirs(where, mode=0o700, exist_ok=True)
        if not _private(where):
            return
        body = len(object_code).to_bytes(8, "little") + bytes(object_code) + \
            optimized_ir.encode()
        payload = zlib.compress(body, 1)
        data = MAGIC + name.encode() + hashlib.sha256(payload).digest() + payload
        fd, tmp = tempfile.mkstemp(dir=where, prefix=".tmp-", suffix=SUFFIX)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, os.path.join(where, name + SUFFIX))
        except BaseException:
            _remove(tmp)
            raise
        _evict(where, max_bytes())
    except OSError:
        return


def _evict(where: str, limit: int) -> None:
    """Remove the least recently used entries until the folder holds at most `limit`
    bytes of them (temporary files of crashed writers older than an hour go too)."""
    import time
    entries = []
    with os.scandir(where) as it:
        for e in it:
            if not e.name.endswith(SUFFIX):
                continue
            try:
                st = e.stat(follow_symlinks=False)
            except OSError:
                continue
            if e.name.startswith(".tmp-"):
                if st.st_mtime < time.time() - 3600:
                    _remove(e.path)
                continue
            entries.append((st.st_mtime, st.st_size, e.path))
    total = sum(size for _, size, _ in entries)
    for _, size, path in sorted(entries):
        if total <= limit:
            break
        _remove(path)
        total -= size


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass
