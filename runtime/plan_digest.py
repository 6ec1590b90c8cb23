"""The plan digest: binds an artifact's native code to the manifest it was compiled for.

The code reads and writes memory at offsets fixed at compile time (the arena layout, the
shapes of inputs, outputs, variables and constants), so a manifest that disagrees with its
code would have the runtime hand it buffers of other sizes. The compiler therefore puts a
placeholder in the code (`MARKER` and 32 zero bytes, the global `graphc_plan_digest` of
the CPU object; a comment line of the PTX), and saving an artifact writes there the
SHA-256 of the manifest's canonical JSON (everything but the section table, the format
version and the signature scheme, which the file format itself checks). Loading recomputes
it from the manifest and refuses a file whose code carries another digest: an edited
manifest, or code that belongs to another program.

This catches mistakes and tampering that did not also patch the code; against a deliberate
attacker only a signature helps (graphc_runtime.artifact, `key=`).
"""
from __future__ import annotations

import hashlib
import json

from . import dims
from .errors import ArtifactError

MARKER = b"GRAPHC-PLAN-DIGEST:"
PLACEHOLDER = MARKER + bytes(32)
PTX_MARKER = b"// graphc-plan-digest: "
CODE_SECTIONS = ("object", "object_profile", "ptx")     # the sections that carry one
_NOT_HASHED = ("sections", "format_version", "signed")


def canonical(manifest: dict) -> bytes:
    """The manifest's bytes that the digest covers."""
    body = {k: v for k, v in manifest.items() if k not in _NOT_HASHED}
    return json.dumps(body, sort_keys=True, separators=(",", ":"),
                      default=dims.json_default).encode()


def digest(manifest: dict) -> bytes:
    """SHA-256 of the manifest as a reader will see it (after a JSON round trip)."""
    seen = json.loads(json.dumps(manifest, sort_keys=True, default=dims.json_default),
                      object_hook=dims.json_object_hook)
    return hashlib.sha256(canonical(seen)).digest()


def stamp_sections(manifest: dict, sections: dict) -> dict:
    """`sections` with each code section's digest set for `manifest` (used when saving)."""
    value = digest(manifest)
    return {name: stamp(data, value, name) if name in CODE_SECTIONS else data
            for name, data in sections.items()}


def stamp(code: bytes, value: bytes, what: str) -> bytes:
    """`code` (object code or PTX) with its digest slot set to `value`."""
    if what == "ptx":
        text = _without_ptx_line(code)
        return PTX_MARKER + value.hex().encode() + b"\n" + text
    at = _slot(code, what)
    return code[:at] + value + code[at + 32:]


def carried(code: bytes, what: str) -> bytes:
    """The digest `code` carries (ArtifactError if it has none, or several)."""
    if what == "ptx":
        if not code.startswith(PTX_MARKER):
            raise ArtifactError(f"the {what} section carries no plan digest")
        line = code[len(PTX_MARKER):code.find(b"\n")]
        try:
            return bytes.fromhex(line.decode())
        except ValueError:
            raise ArtifactError(f"the {what} section's plan digest is malformed") from None
    at = _slot(code, what)
    return code[at:at + 32]


def check(manifest: dict, sections: dict, label: str) -> None:
    """Refuse an artifact whose code was not compiled for this manifest."""
    want = digest(manifest)
    for name in CODE_SECTIONS:
        if name in sections and carried(sections[name], name) != want:
            raise ArtifactError(f"{label}: the manifest does not match its code ({name!r} "
                                f"was compiled for another plan): the manifest was edited, "
                                f"or the code belongs to another program")


def _slot(code: bytes, what: str) -> int:
    first = code.find(MARKER)
    if first < 0:
        raise ArtifactError(f"the {what} code carries no plan digest (saved by an older "
                            f"graphc? compile and save it again)")
    if code.find(MARKER, first + 1) >= 0:
        raise ArtifactError(f"the {what} code carries more than one plan digest")
    at = first + len(MARKER)
    if at + 32 > len(code):
        raise ArtifactError(f"the {what} code's plan digest is cut off")
    return at


def _without_ptx_line(code: bytes) -> bytes:
    if code.startswith(PTX_MARKER):
        return code[code.find(b"\n") + 1:]
    return code
