"""The artifact file format: one file, a checksummed manifest, checksummed sections and,
for a signed artifact, a signature over all of it.

    8 bytes   magic b"GRAPHCAR"
    4 bytes   format version (little-endian u32)
    8 bytes   manifest length N (little-endian u64)
    N bytes   manifest (UTF-8 JSON)
    32 bytes  SHA-256 of the manifest
    ...       section data, back to back in the order of the manifest's section table
              (each entry: offset, length, SHA-256); nothing between or after them
    40 bytes  only when the manifest says "signed": b"GRAPHCSG" and the HMAC-SHA256 of
              every byte before it, under the signer's key

Sections hold the native object code (from version 4 one object file or several packed
by graphc_runtime.objects; version 3, which this runtime still reads, holds one), the
optimized graph (JSON), text dumps, and variables and constants as raw little-endian
arrays. No pickle.

Trust: the object code is native code, and loading an artifact runs it, as loading a
shared library does. Checksums catch accidents, not intent. A key (`key=`, bytes of at
least 16) signs an artifact when it is saved and verifies it when it is loaded: a file
whose signature does not verify under the key, or that is not signed, is refused; with
GRAPHC_REQUIRE_SIGNED=1 (or `require_signed=True`) every unsigned file is refused.

Files are written to a temporary name beside the target and renamed, so a reader never
sees half a file; a temporary left by a save that was killed is removed by the next save
to the same path.
"""
from __future__ import annotations

import glob
import hashlib
import hmac
import json
import os
import struct
import tempfile

from . import dims
from .errors import ArtifactError

MAGIC = b"GRAPHCAR"
FORMAT_VERSION = 4        # the one this runtime writes: the object section may pack several
                          # objects (graphc_runtime.objects), which a version-3 reader
                          # cannot load
OLDEST_READ = 3           # from 3 on, the code carries the plan digest
                          # (graphc_runtime.plan_digest) and the file may be signed
_HEADER = struct.Struct("<8sIQ")
SIGNATURE_MAGIC = b"GRAPHCSG"
SIGNATURE_BYTES = len(SIGNATURE_MAGIC) + 32
SCHEME = "hmac-sha256"
MIN_KEY_BYTES = 16
MAX_MANIFEST_BYTES = 256 << 20
_TEMP_SUFFIX = ".gcx-partial"


def as_key(key) -> bytes | None:
    """A signing key as bytes (str is taken as UTF-8); None stays None."""
    if key is None:
        return None
    if isinstance(key, str):
        key = key.encode()
    if not isinstance(key, (bytes, bytearray)):
        raise ArtifactError(f"a signing key is bytes or str, not {type(key).__name__}")
    if len(key) < MIN_KEY_BYTES:
        raise ArtifactError(f"a signing key needs at least {MIN_KEY_BYTES} bytes, this one "
                            f"has {len(key)}")
    return bytes(key)


def signing_required(require_signed: bool | None = None) -> bool:
    """The caller's choice, else the GRAPHC_REQUIRE_SIGNED setting (1/true/yes)."""
    if require_signed is not None:
        return bool(require_signed)
    return os.environ.get("GRAPHC_REQUIRE_SIGNED", "").strip().lower() in ("1", "true", "yes")


def encode(manifest: dict, sections: dict, key=None) -> bytes:
    """The bytes of an artifact of `manifest` (JSON-able) and `sections` (name -> bytes),
    signed when `key` is given."""
    key = as_key(key)
    table, offset = {}, 0
    for name, data in sections.items():
        table[name] = {"offset": offset, "length": len(data),
                       "sha256": hashlib.sha256(data).hexdigest()}
        offset += len(data)
    manifest = {k: v for k, v in manifest.items() if k != "signed"}
    manifest = dict(manifest, format_version=FORMAT_VERSION, sections=table)
    if key is not None:
        manifest["signed"] = SCHEME
    head = json.dumps(manifest, sort_keys=True, default=dims.json_default).encode()
    parts = [_HEADER.pack(MAGIC, FORMAT_VERSION, len(head)), head,
             hashlib.sha256(head).digest(), *sections.values()]
    body = b"".join(parts)
    if key is not None:
        body += SIGNATURE_MAGIC + hmac.new(key, body, hashlib.sha256).digest()
    return body


def write(path: str, manifest: dict, sections: dict, key=None) -> None:
    """Write the artifact to `path` atomically (see `encode`)."""
    data = encode(manifest, sections, key)
    path = os.path.abspath(path)
    directory, base = os.path.split(path)
    _remove_stale_temporaries(directory, base)
    fd, tmp = tempfile.mkstemp(prefix=f".{base}.{os.getpid()}.", suffix=_TEMP_SUFFIX,
                               dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _remove_stale_temporaries(directory: str, base: str) -> None:
    """Temporaries of saves to the same path whose process is gone (killed midway)."""
    for tmp in glob.glob(os.path.join(glob.escape(directory),
                                      f".{glob.escape(base)}.*{_TEMP_SUFFIX}")):
        rest = os.path.basename(tmp)[len(base) + 2:]
        pid = rest.split(".", 1)[0]
        if pid.isdigit() and not _alive(int(pid)):
            try:
                os.unlink(tmp)
            except OSError:
                pass


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def read(path: str, key=None, require_signed: bool | None = None) -> tuple[dict, dict]:
    """(manifest, sections) of the artifact at `path`; ArtifactError if it is not a
    complete, intact graphc artifact of this format, or fails the signature policy."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise ArtifactError(f"cannot read artifact {path!r}: {e.strerror}") from None
    return parse(data, str(path), key=key, require_signed=require_signed)


def parse(data: bytes, label: str = "artifact", key=None,
          require_signed: bool | None = None) -> tuple[dict, dict]:
    key = as_key(key)
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
    if version < OLDEST_READ:
        raise ArtifactError(f"{label}: written in format version {version} by an older graphc, "
                            f"whose code does not carry the digest of its plan; compile and "
                            f"save it again")
    start = _HEADER.size
    if n > min(len(data) - start - 32, MAX_MANIFEST_BYTES):
        raise ArtifactError(f"{label}: truncated (manifest of {n} bytes does not fit)")
    head = data[start:start + n]
    if hashlib.sha256(head).digest() != data[start + n:start + n + 32]:
        raise ArtifactError(f"{label}: manifest checksum mismatch: the file is corrupt or "
                            f"its manifest was edited")
    try:
        manifest = json.loads(head.decode(), object_hook=dims.json_object_hook)
    except (UnicodeDecodeError, ValueError, TypeError, KeyError, RecursionError) as e:
        raise ArtifactError(f"{label}: manifest is not valid JSON ({e})") from None
    if not isinstance(manifest, dict) or manifest.get("format_version") != version:
        raise ArtifactError(f"{label}: manifest does not match the header")
    signed = manifest.get("signed")
    if signed not in (None, SCHEME):
        raise ArtifactError(f"{label}: unknown signature scheme {signed!r}")
    end = len(data) - (SIGNATURE_BYTES if signed else 0)
    _check_signature(data, end, signed, key, require_signed, label)
    base = start + n + 32
    table = manifest.get("sections")
    if not isinstance(table, dict):
        raise ArtifactError(f"{label}: manifest has no section table")
    entries = []
    for name, rec in table.items():
        try:
            off, length, digest = rec["offset"], rec["length"], rec["sha256"]
        except (KeyError, TypeError):
            raise ArtifactError(f"{label}: malformed entry for section {name!r}") from None
        if not (type(off) is int and type(length) is int and isinstance(digest, str)):
            raise ArtifactError(f"{label}: malformed entry for section {name!r}")
        entries.append((off, length, name, digest))
    sections, expected = {}, 0
    for off, length, name, digest in sorted(entries):
        if off != expected or length < 0:
            raise ArtifactError(f"{label}: section {name!r} is not where the table says "
                                f"sections lie (back to back from the manifest)")
        if base + off + length > end:
            raise ArtifactError(f"{label}: truncated (section {name!r} ends past the end of "
                                f"the file)")
        blob = data[base + off:base + off + length]
        if hashlib.sha256(blob).hexdigest() != digest:
            raise ArtifactError(f"{label}: section {name!r} checksum mismatch: the file is "
                                f"corrupt")
        sections[name] = blob
        expected = off + length
    if base + expected != end:
        raise ArtifactError(f"{label}: {end - base - expected} unexpected bytes after the last "
                            f"section")
    return manifest, sections


def _check_signature(data, end, signed, key, require_signed, label) -> None:
    if not signed:
        if key is not None:
            raise ArtifactError(f"{label}: the artifact is not signed, and a key was given to "
                                f"verify it")
        if signing_required(require_signed):
            raise ArtifactError(f"{label}: the artifact is not signed, and signatures are "
                                f"required (GRAPHC_REQUIRE_SIGNED / require_signed)")
        return
    if end < _HEADER.size or data[end:end + len(SIGNATURE_MAGIC)] != SIGNATURE_MAGIC:
        raise ArtifactError(f"{label}: the manifest says signed, but the file ends without "
                            f"a signature")
    if key is None:
        if signing_required(require_signed):
            raise ArtifactError(f"{label}: the artifact is signed, but no key was given to "
                                f"verify it and signatures are required")
        return
    mac = hmac.new(key, data[:end], hashlib.sha256).digest()
    if not hmac.compare_digest(mac, data[end + len(SIGNATURE_MAGIC):]):
        raise ArtifactError(f"{label}: the signature does not verify under this key: the "
                            f"file was changed after it was signed, or signed with another "
                            f"key")
