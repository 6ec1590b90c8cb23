"""Validation of an artifact's manifest, field by field, before anything is mapped or run.

Every value the runtime uses to size or address memory is checked for its type and range:
shapes hold non-negative integers (or symbolic sizes), no buffer's size passes the address
space, dtypes are known, the output structure names outputs that exist, collective steps
name slots of the program's table. What fails is an ArtifactError naming the field.
(That the code agrees with the manifest is graphc_runtime.plan_digest's check.)
"""
from __future__ import annotations

from .dims import Dim
from .dtypes import NUMPY
from .errors import ArtifactError

ADDRESS_SPACE_BYTES = 1 << 47
_REQUIRED = {"graphc_version": str, "device": str, "target": dict, "signature": dict,
             "structure": (dict, list, int), "arena_bytes": (int, Dim), "constants": list}


def validate(manifest: dict, label: str) -> None:
    for key, kind in _REQUIRED.items():
        value = manifest.get(key)
        if not isinstance(value, kind) or isinstance(value, bool):
            raise ArtifactError(f"{label}: manifest field {key!r} is missing or malformed")
    _size(manifest["arena_bytes"], 1, "arena_bytes", label)
    signature = manifest["signature"]
    symbols = signature.get("symbols", [])
    if not isinstance(symbols, list) or not all(isinstance(s, str) for s in symbols) or \
            len(set(symbols)) != len(symbols):
        raise ArtifactError(f"{label}: signature's symbols are malformed")
    counts = {}
    for part in ("inputs", "outputs", "variables"):
        entries = signature.get(part)
        if not isinstance(entries, list):
            raise ArtifactError(f"{label}: signature has no {part} list")
        names = set()
        for k, entry in enumerate(entries):
            what = f"signature {part}[{k}]"
            if not (isinstance(entry, list) and len(entry) == 3 and isinstance(entry[0], str)):
                raise ArtifactError(f"{label}: {what} is not [name, shape, dtype]")
            name, shape, dtype = entry
            if name in names:
                raise ArtifactError(f"{label}: {what}: the name {name!r} appears twice")
            names.add(name)
            _shape(shape, dtype, f"{what} ({name!r})", label, symbols)
        counts[part] = len(entries)
    for k, entry in enumerate(manifest["constants"]):
        if not (isinstance(entry, list) and len(entry) == 2):
            raise ArtifactError(f"{label}: constant entry {k} is not [shape, dtype]")
        _shape(entry[0], entry[1], f"constant {k}", label, [])
    recipes = manifest.get("derived", {})
    if not isinstance(recipes, dict) or not all(
            isinstance(k, str) and k.isdigit() and int(k) < len(manifest["constants"]) and
            isinstance(v, dict) for k, v in recipes.items()):
        raise ArtifactError(f"{label}: the derived-constants table is malformed")
    _structure(manifest["structure"], counts["outputs"], label, 0)
    slots = 1 + counts["inputs"] + counts["outputs"] + counts["variables"] + \
        len(manifest["constants"])
    _collectives(manifest.get("collectives", []), slots, manifest["arena_bytes"], symbols,
                 label)
    if manifest["device"] == "cuda" and not isinstance(manifest.get("launches"), list):
        raise ArtifactError(f"{label}: CUDA artifact without a launch table")


def _shape(shape, dtype, what: str, label: str, symbols) -> None:
    if not isinstance(dtype, str) or dtype not in NUMPY:
        raise ArtifactError(f"{label}: {what}: unknown dtype {dtype!r}")
    if not isinstance(shape, list) or len(shape) > 64:
        raise ArtifactError(f"{label}: {what}: the shape is not a list of sizes")
    total = NUMPY[dtype].itemsize
    for d in shape:
        if isinstance(d, Dim):
            unknown = d.symbols() - set(symbols)
            if unknown:
                raise ArtifactError(f"{label}: {what}: size {d} uses symbols the signature "
                                    f"does not declare")
            continue
        if type(d) is not int or d < 0:
            raise ArtifactError(f"{label}: {what}: size {d!r} is not a non-negative integer")
        total *= d
        if total > ADDRESS_SPACE_BYTES:
            raise ArtifactError(f"{label}: {what}: shape {shape} is larger than any address "
                                f"space")


def _size(value, scale: int, what: str, label: str) -> None:
    if isinstance(value, Dim):
        return
    if type(value) is not int or value < 0 or value * scale > ADDRESS_SPACE_BYTES:
        raise ArtifactError(f"{label}: manifest field {what!r} = {value!r} is out of range")


def _structure(node, outputs: int, label: str, depth: int) -> None:
    if depth > 64:
        raise ArtifactError(f"{label}: output structure nested too deeply")
    if type(node) is int:
        if not 0 <= node < outputs:
            raise ArtifactError(f"{label}: output structure names output {node}, the "
                                f"program has {outputs}")
        return
    if isinstance(node, dict) and len(node) == 1:
        (kind, items), = node.items()
        if kind == "dict" and isinstance(items, list):
            for item in items:
                if not (isinstance(item, list) and len(item) == 2 and
                        isinstance(item[0], str)):
                    raise ArtifactError(f"{label}: malformed dict entry in the output "
                                        f"structure")
                _structure(item[1], outputs, label, depth + 1)
            return
        if kind in ("tuple", "list") and isinstance(items, list):
            for item in items:
                _structure(item, outputs, label, depth + 1)
            return
    raise ArtifactError(f"{label}: malformed output structure")


def _collectives(steps, slots: int, arena, symbols, label: str) -> None:
    """Each step reads and writes a slot of the program's table or bytes of the arena."""
    if not isinstance(steps, list):
        raise ArtifactError(f"{label}: the collectives table is not a list")
    for k, step in enumerate(steps):
        if not (isinstance(step, dict) and isinstance(step.get("op"), str) and
                isinstance(step.get("attrs"), dict)):
            raise ArtifactError(f"{label}: collective step {k} is malformed")
        for end in ("src", "dst"):
            view = step.get(end)
            what = f"collective step {k} {end}"
            if not isinstance(view, dict):
                raise ArtifactError(f"{label}: {what} is missing")
            _shape(view.get("shape"), view.get("dtype"), what, label, symbols)
            if "slot" in view:
                if type(view["slot"]) is not int or not 0 < view["slot"] < slots:
                    raise ArtifactError(f"{label}: {what} names no slot of the program")
                continue
            offset = view.get("offset")
            if isinstance(offset, Dim) or isinstance(arena, Dim):
                continue
            if type(offset) is not int or offset < 0:
                raise ArtifactError(f"{label}: {what} has no valid arena offset")
            count = NUMPY[view["dtype"]].itemsize
            for d in view["shape"]:
                count *= d if type(d) is int else 0
            if offset + count > arena:
                raise ArtifactError(f"{label}: {what} ends past the arena ({offset} + "
                                    f"{count} > {arena} bytes)")
