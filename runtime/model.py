"""Loading and saving artifacts, and the Model they load as (no compiler needed)."""
from __future__ import annotations

import hashlib

import numpy as np

from . import artifact, derived, plan_digest
from . import manifest as manifests
from .cpu import CpuProgram, Signature, host_features, llvm
from .dtypes import NUMPY
from .errors import ArtifactError, GraphcError

STAGES = ("graph", "optimized", "fused", "memory", "llvm", "asm")
# what a malformed manifest can raise from code that reads it: refused as ArtifactError
_MALFORMED = (KeyError, TypeError, ValueError, IndexError, AttributeError, OverflowError,
              RecursionError)


def rebuild(structure, values):
    """Outputs in the structure recorded by the compiler (see graphc.api.structure_of)."""
    if isinstance(structure, int):
        return values[structure]
    if "dict" in structure:
        return {k: rebuild(v, values) for k, v in structure["dict"]}
    kind = tuple if "tuple" in structure else list
    return kind(rebuild(v, values) for v in next(iter(structure.values())))


def array_bytes(a: np.ndarray) -> bytes:
    a = np.ascontiguousarray(a)
    return a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes()


VIEW_ALIGNMENT = 16      # what malloc gives numpy's arrays on 64-bit hosts


def bytes_array(blob: bytes, shape, dtype: str, what: str) -> np.ndarray:
    """The array of `blob`'s little-endian bytes: a read-only view of them where the host
    is little-endian and they lie aligned, else a copy (ArtifactError for a wrong size)."""
    npd = NUMPY.get(dtype)
    if npd is None:
        raise ArtifactError(f"{what}: unknown dtype {dtype!r}")
    count = int(np.prod(shape, dtype=np.int64))
    if len(blob) != count * npd.itemsize:
        raise ArtifactError(f"{what}: holds {len(blob)} bytes, {shape} {dtype} needs "
                            f"{count * npd.itemsize}")
    a = np.frombuffer(blob, dtype=npd.newbyteorder("<"))
    if a.dtype != npd or a.ctypes.data % VIEW_ALIGNMENT:   # another byte order, or a
        a = a.astype(npd)             # view not aligned as numpy's own arrays are: a copy
    return a.reshape(shape)           # else a read-only view of the bytes (not copied)


def check_target(manifest: dict, label: str) -> None:
    target = manifest["target"]
    if manifest["device"] == "cuda":
        if not isinstance(target.get("arch"), str) or not isinstance(manifest.get("launches"),
                                                                     list):
            raise ArtifactError(f"{label}: CUDA artifact without an arch or launch table")
        return                          # checked against the GPU when it first runs
    if manifest["device"] != "cpu":
        raise ArtifactError(f"{label}: built for unknown device {manifest['device']!r}")
    b = llvm()
    triple = b.get_process_triple()
    if target.get("triple") != triple:
        raise ArtifactError(f"{label}: built for {target.get('triple')!r}, this machine is "
                            f"{triple!r}")
    have = {f[1:] for f in host_features().split(",") if f.startswith("+")}
    need = {f[1:] for f in str(target.get("features", "")).split(",") if f.startswith("+")}
    missing = sorted(need - have)
    if missing:
        raise ArtifactError(f"{label}: this CPU lacks features the code was built for: "
                            f"{', '.join(missing[:12])}" + (" ..." if len(missing) > 12 else ""))


class Model:
    """A loaded artifact: call it like the Executable it was saved from."""

    def __init__(self, manifest: dict, sections: dict, label: str = "artifact"):
        try:
            self._load(manifest, sections, label)
        except GraphcError as e:
            if isinstance(e, ArtifactError):
                raise
            raise ArtifactError(f"{label}: {e}") from None
        except MemoryError as e:
            raise ArtifactError(f"{label}: cannot allocate the program's memory ({e})") \
                from None
        except _MALFORMED as e:
            raise ArtifactError(f"{label}: malformed manifest ({type(e).__name__}: "
                                f"{e})") from None

    def _load(self, manifest: dict, sections: dict, label: str) -> None:
        """Every check before anything is mapped: the manifest's fields, its agreement
        with the code (plan digest), the target; then the program is loaded."""
        if not isinstance(manifest, dict):
            raise ArtifactError(f"{label}: the manifest is not an object")
        manifests.validate(manifest, label)
        plan_digest.check(manifest, sections, label)
        check_target(manifest, label)
        try:
            signature = Signature.from_json(manifest["signature"])
        except (KeyError, TypeError, ValueError):
            raise ArtifactError(f"{label}: malformed signature") from None
        variables = {}
        for name, shape, dtype in signature.variables:
            blob = sections.get(f"variable/{name}")
            if blob is None:
                raise ArtifactError(f"{label}: variable {name!r} has no data section")
            variables[name] = bytes_array(blob, shape, dtype, f"{label}: variable {name!r}")
        constants = []
        recipes = manifest.get("derived") or {}
        for k, entry in enumerate(manifest["constants"]):
            try:
                shape, dtype = tuple(entry[0]), entry[1]
            except (TypeError, IndexError):
                raise ArtifactError(f"{label}: malformed constant entry {k}") from None
            blob = sections.get(f"constant/{k}")
            if blob is None and str(k) in recipes:      # computed from a tensor it holds
                recipe = recipes[str(k)]
                source = _tensor_section(sections, manifest, recipe.get("from"))
                constants.append(derived.compute(recipe, source, shape, dtype,
                                                 f"{label}: constant {k}"))
                continue
            if blob is None:
                raise ArtifactError(f"{label}: constant {k} has no data section")
            constants.append(bytes_array(blob, shape, dtype, f"{label}: constant {k}"))
        from .errors import CompileError
        if manifest["device"] == "cuda":
            if "ptx" not in sections:
                raise ArtifactError(f"{label}: no PTX section")
            from .cuda import CudaProgram
            self._native = CudaProgram(sections["ptx"].decode(errors="replace"),
                                       manifest["target"]["arch"], manifest["launches"],
                                       signature, manifest["arena_bytes"], variables, constants)
        else:
            if "object" not in sections:
                raise ArtifactError(f"{label}: no native code section")
            try:
                self._native = CpuProgram(sections["object"], signature,
                                          manifest["arena_bytes"], variables, constants,
                                          manifest.get("collectives", []))
            except CompileError as e:
                raise ArtifactError(f"{label}: {e}") from None
        self.manifest = manifest
        self._sections = sections
        self.signature = signature

    def __call__(self, *args, **kwargs):
        return rebuild(self.manifest["structure"], self._native.run(args, kwargs))

    @property
    def variables(self):
        return self._native.variables

    @property
    def input_names(self) -> list:
        return [n for n, _, _ in self.signature.inputs]

    def dump(self, stage: str = "optimized") -> str:
        blob = self._sections.get(f"dump/{stage}")
        if blob is None:
            raise ArtifactError(f"this artifact holds no {stage!r} dump; it has: "
                                f"{', '.join(s[5:] for s in self._sections if s.startswith('dump/'))}")
        return blob.decode()

    def tensor_bytes(self, digest: str) -> bytes | None:
        """The bytes a graph's array reference names (by SHA-256): a "tensor/" section,
        or a constant's section holding the same bytes; None if absent."""
        return _tensor_section(self._sections, self.manifest, digest)

    def graph_json(self) -> str:
        """The optimized graph, as graphc.ir.serialize writes it."""
        return self._sections["graph.json"].decode()

    def fusion_plan(self) -> dict:
        """Fusion groups (kernels) of the program: {"groups": [...], "outputs": [...]}."""
        import json
        try:
            return json.loads(self._sections["fusion.json"].decode())
        except (KeyError, ValueError):
            raise ArtifactError("this artifact holds no readable fusion plan") from None

    def profile(self, repeat: int = 10, *args, **kwargs):
        """Per-kernel times of `repeat` calls (see graphc_runtime.profile); needs the
        profiling build that Executable.save stores with the program."""
        from .profile import profile_program
        if self.manifest["device"] != "cpu":
            raise ArtifactError("profiling a CUDA artifact is not supported yet")
        code = self._sections.get("object_profile")
        if code is None:
            raise ArtifactError("this artifact holds no profiling build (saved by an older "
                                "graphc); save it again to profile it")
        return profile_program(self._native, code, self.manifest, repeat, args, kwargs)

    def save(self, path: str, key=None) -> None:
        """Write this model, with its current variable values, as a new artifact (signed
        with `key`, bytes, when given)."""
        sections = dict(self._sections)
        for name, value in self.variables.items():
            sections[f"variable/{name}"] = array_bytes(value)
        manifest = {k: v for k, v in self.manifest.items()
                    if k not in ("sections", "signed", "format_version")}
        artifact.write(path, manifest, plan_digest.stamp_sections(manifest, sections), key=key)


def load(path: str, key=None, require_signed: bool | None = None) -> Model:
    """Load an artifact written by `Executable.save`: checks its integrity, its manifest
    against its code, and the target. Loading runs the artifact's native code, as
    loading a shared library does: load only files you trust. With `key` (the bytes it
    was signed with) a file whose signature does not verify, or that is unsigned, is
    refused; `require_signed` (default: GRAPHC_REQUIRE_SIGNED=1) refuses every unsigned
    file."""
    manifest, sections = artifact.read(path, key=key, require_signed=require_signed)
    return Model(manifest, sections, label=str(path))


def _tensor_section(sections: dict, manifest: dict, digest) -> bytes | None:
    """The bytes of tensor `digest`: its own section, or a constant's with those bytes."""
    if not isinstance(digest, str):
        return None
    blob = sections.get(f"tensor/{digest}")
    if blob is not None:
        return blob
    for name, rec in (manifest.get("sections") or {}).items():
        if name.startswith("constant/") and isinstance(rec, dict) and \
                rec.get("sha256") == digest:
            return sections.get(name)
    for k, entry in (manifest.get("derived") or {}).items():   # a constant computed at load
        if isinstance(entry, dict) and entry.get("sha256") == digest and \
                entry.get("from") != digest:
            shape, dtype = manifest["constants"][int(k)]
            value = derived.compute(entry, _tensor_section(sections, manifest,
                                                           entry.get("from")),
                                    tuple(shape), dtype, "artifact")
            return array_bytes(value)
    return None


def save_program(path: str, manifest: dict, static_sections: dict, variables: dict,
                 constants: list, key=None) -> None:
    """Write an artifact from a compiled program's parts (used by graphc's Executable).
    Each tensor's bytes are stored once: a graph's array whose bytes a constant's section
    already holds is not stored again (its reference finds them there)."""
    sections = dict(static_sections)
    for name, value in variables.items():
        sections[f"variable/{name}"] = array_bytes(value)
    recipes = manifest.get("derived") or {}
    held = {entry["sha256"] for entry in recipes.values()}
    for k, c in enumerate(constants):
        if str(k) not in recipes:                      # (else computed when loaded)
            sections[f"constant/{k}"] = array_bytes(c)
            held.add(hashlib.sha256(sections[f"constant/{k}"]).hexdigest())
    sections = {name: data for name, data in sections.items()
                if not (name.startswith("tensor/") and name[7:] in held)}
    artifact.write(path, manifest, plan_digest.stamp_sections(manifest, sections), key=key)
