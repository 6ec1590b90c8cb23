"""The folder of graphc's persistent caches, shared by the processes of one user: entries
of bytes under a hashed name, written atomically, bounded in size, never trusted.

Four caches keep entries here: graphc's object code keyed by its LLVM IR
(graphc/backends/cpu/object_cache.py), whole compiled programs keyed by the graph
(graphc/program_cache.py), graphc's own GEMM kernels (graphc/backends/cpu/gemm.py) and
the thread pool's own code (pool.py). Each `Kind` has its own magic, suffix and
compression.

Settings (environment): GRAPHC_CACHE=0 turns every cache off; GRAPHC_CACHE_DIR chooses the
folder (default $XDG_CACHE_HOME/graphc, else ~/.cache/graphc); GRAPHC_CACHE_MAX_BYTES
bounds the size of all entries together (default 1 GiB; the least recently used go
first).

An entry holds its magic, its own name and the sha256 of its payload (or a payload that
checks itself); it is read only if
this user owns it and nobody else may write it (nor its folder), and is removed when
anything does not match. Writes go to a temporary file renamed into place, so concurrent
processes see a whole entry or none. A cache that cannot be used (a read-only home, a
full disk) is skipped without error.
"""
from __future__ import annotations

import functools
import hashlib
import os
import stat
import tempfile
import time
import zlib
from dataclasses import dataclass

DEFAULT_MAX_BYTES = 1 << 30
NAME_BYTES = 64                                   # a sha256 in hex


@dataclass(frozen=True)
class Kind:
    magic: bytes
    suffix: str
    compress: bool
    checksum: bool = True        # False: the payload checks itself (an artifact's sha256s)


SUFFIXES = (".gco", ".gcp", ".gcn", ".gcg")        # every kind's, for the size bound


def _on(variable: str) -> bool:
    return os.environ.get(variable, "1").strip().lower() not in ("0", "false", "no", "off",
                                                                 "")


def enabled() -> bool:
    return _on("GRAPHC_CACHE")


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


def entry_name(kind: Kind, *parts: str) -> str:
    """An entry's name: the sha256 of the kind's magic and `parts` (what decides it)."""
    h = hashlib.sha256(kind.magic)
    for part in parts:
        h.update(part.encode() + b"\0")
    return h.hexdigest()


def remove(kind: Kind, name: str) -> None:
    """Drop entry `name` (one its reader found wrong)."""
    _remove(os.path.join(folder(), name + kind.suffix))


@functools.lru_cache(maxsize=None)
def source_fingerprint() -> str:
    """sha256 of the source files of graphc_runtime and, where installed, graphc (about
    1 MB, ~3 ms): in a key, it keeps an edited graphc from reading an older one's work."""
    import importlib.util
    roots = [os.path.dirname(os.path.abspath(__file__))]
    spec = importlib.util.find_spec("graphc")
    if spec is not None and spec.origin:
        roots.append(os.path.dirname(os.path.abspath(spec.origin)))
    h = hashlib.sha256()
    for root in roots:
        for where, dirs, files in os.walk(root):
            dirs.sort()
            for name in sorted(files):
                if name.endswith(".py"):
                    path = os.path.join(where, name)
                    h.update(os.path.relpath(path, root).encode() + b"\0")
                    with open(path, "rb") as f:
                        h.update(f.read())
    return h.hexdigest()


def _private(path: str, st=None) -> bool:
    """Owned by this user and writable by nobody else."""
    st = st or os.stat(path)
    return st.st_uid == os.getuid() and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def load(kind: Kind, name: str) -> bytes | None:
    """The payload of entry `name`, or None (missing, corrupt, foreign, not private: a
    bad entry is removed)."""
    if not enabled():
        return None
    where = folder()
    path = os.path.join(where, name + kind.suffix)
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
        payload = _decode(kind, raw, name)
    except (OSError, ValueError, zlib.error):
        payload = None
    if payload is None:
        _remove(path)
        return None
    try:
        os.utime(path)                     # recently used: evicted last
    except OSError:
        pass
    return payload


def _decode(kind: Kind, raw: bytes, name: str) -> bytes | None:
    head = len(kind.magic)
    if raw[:head] != kind.magic or len(raw) < head + NAME_BYTES + 32 * kind.checksum:
        return None
    if raw[head:head + NAME_BYTES] != name.encode():    # an entry renamed from elsewhere
        return None
    if not kind.checksum:
        return raw[head + NAME_BYTES:]
    digest, payload = raw[head + NAME_BYTES:head + NAME_BYTES + 32], \
        raw[head + NAME_BYTES + 32:]
    if hashlib.sha256(payload).digest() != digest:
        return None
    return zlib.decompress(payload) if kind.compress else payload


def store(kind: Kind, name: str, payload: bytes) -> None:
    """Write entry `name` (atomically), then keep the folder under its size bound."""
    if not enabled():
        return
    where = folder()
    try:
        os.makedirs(where, mode=0o700, exist_ok=True)
        if not _private(where):
            return
        if kind.compress:
            payload = zlib.compress(payload, 1)
        data = kind.magic + name.encode() + \
            (hashlib.sha256(payload).digest() if kind.checksum else b"") + payload
        fd, tmp = tempfile.mkstemp(dir=where, prefix=".tmp-", suffix=kind.suffix)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, os.path.join(where, name + kind.suffix))
        except BaseException:
            _remove(tmp)
            raise
        _evict(where, max_bytes())
    except OSError:
        return


def _evict(where: str, limit: int) -> None:
    """Remove the least recently used entries until the folder holds at most `limit`
    bytes of them (temporary files of crashed writers older than an hour go too)."""
    entries = []
    with os.scandir(where) as it:
        for e in it:
            if not e.name.endswith(SUFFIXES):
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
