"""A persistent cache of whole compiled programs, keyed by the graph (like JAX's).

The object cache (backends/cpu/object_cache.py) saves LLVM's work, but the graph passes,
fusion and code emission still run before it can be asked. This cache is asked first: an
entry is keyed by the sha256 of everything a CPU compile reads, namely

- the graph as the user built it (every node, attribute, shape, name and source line,
  the bytes of every constant; not the variables' values, which the program reads when
  it runs), the outputs, updates, inputs and the outputs' structure;
- the compile options, the backend's thread count and the GRAPHC_* settings;
- the host (triple, CPU, features), the versions of Python, numpy, llvmlite and LLVM,
  and a fingerprint of graphc's own source files (so an edited graphc never reads an
  older graphc's programs);

and holds what an artifact holds but the variables: the object code, the manifest, the
constants that are not arrays of the graph (the key covers those bytes: a hit takes
them from the graph), the dumps and the compile's stats. A hit builds the Executable from it (like
`graphc_runtime.load`), bound to the graph's variables, without running the compiler.
`dump("asm")` and `profile()` of a hit compile the program again when first asked (they
need the compiler's module).

Not cached (the compiler runs as before, and stats["program_cache"] says why): other
devices than the CPU, `distributed=` and `dump_dir=` compiles, and graphs that use a
primitive, lowering or rule registered from outside graphc (its code is not in the
fingerprint). GRAPHC_PROGRAM_CACHE=0 turns this cache off alone, GRAPHC_CACHE=0 turns it
off with the object cache; the folder and its size bound are cache_store's.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys

from graphc_runtime import cache_store
from graphc_runtime.dims import json_default

# an artifact checks itself (its header's and every section's sha256)
KIND = cache_store.Kind(b"GRAPHC-PROGRAM-CACHE-1\n", ".gcp", compress=False, checksum=False)
LABEL = "program cache entry"
_OWN_SETTINGS = ("GRAPHC_CACHE", "GRAPHC_CACHE_DIR", "GRAPHC_CACHE_MAX_BYTES",
                 "GRAPHC_PROGRAM_CACHE",
                 "GRAPHC_COMPILE_PROCESSES")     # how many compile it: the same program


def enabled() -> bool:
    return cache_store.enabled() and cache_store._on("GRAPHC_PROGRAM_CACHE")


def _ops(graph, seen=None) -> set:
    """The primitives a graph uses, its regions' (control flow bodies) included."""
    from .ir.region import Region
    seen = set() if seen is None else seen
    for n in graph.nodes:
        seen.add(n.op)
        for value in n.attrs.values():
            for v in value if isinstance(value, tuple) else (value,):
                if isinstance(v, Region):
                    _ops(v.graph, seen)
    return seen


def _foreign_rule(ops: set) -> str | None:
    """An op among `ops` whose declaration, expression, lowering or VJP comes from
    outside graphc, or None."""
    from .autodiff import RULES
    from .backends.llvm.lowerings import FLOAT, INT
    from .ir.primitive import REGISTRY
    from .kernels.expressions import EXPRESSIONS
    for op in sorted(ops):
        prim = REGISTRY.get(op)
        rules = [prim.rule, prim.impl] if prim is not None else [None]
        rules += [table[op] for table in (EXPRESSIONS, FLOAT, INT, RULES) if op in table]
        for rule in rules:
            module = getattr(getattr(rule, "func", rule), "__module__", None) or ""
            if not isinstance(rule, str) and module.split(".")[0] not in ("graphc",
                                                                          "graphc_runtime"):
                return op
    return None


def key(graph, roots: dict, backend, options: dict) -> tuple[str | None, str, dict]:
    """(entry name, "", the graph's arrays {sha256 hex: bytes}) for a compile the cache
    can serve, else (None, why not, {})."""
    from .backends.cpu.backend import CpuBackend
    if not enabled():
        return None, "off", {}
    if type(backend) is not CpuBackend:
        return None, f"not used: device {backend.device}", {}
    for option in ("distributed", "dump_dir"):
        if options.get(option) is not None:
            return None, f"not used: {option}=", {}
    foreign = _foreign_rule(_ops(graph))
    if foreign is not None:
        return None, f"not used: primitive {foreign!r} has rules from outside graphc", {}
    import numpy as np
    from graphc_runtime.host import llvm_identity
    from .ir.serialize import graph_to_dict
    settings = sorted((k, v) for k, v in os.environ.items()
                      if k.startswith("GRAPHC_") and k not in _OWN_SETTINGS)
    compile_options = sorted((k, repr(v)) for k, v in options.items())
    tensors: dict = {}
    try:
        described = json.dumps({
            "graph": graph_to_dict(graph, include_variables=False, tensors=tensors),
            "roots": roots, "options": compile_options, "threads": backend.threads,
            "opt_level": backend.opt_level, "settings": settings,
            "host": llvm_identity(),
            "versions": [sys.version, np.__version__, cache_store.source_fingerprint()],
        }, sort_keys=True, default=json_default)
    except (TypeError, ValueError) as e:
        return None, f"not used: the graph does not serialize ({e})", {}
    return cache_store.entry_name(KIND, described), "", tensors


def store(name: str, exe, tensors) -> None:
    """Keep `exe` (just compiled) as entry `name`: an artifact without the variables and
    without the constants that are arrays of the graph (`tensors`: the sha256 hex names
    of key()'s): the key covers their bytes, so a hit takes them from the graph it was
    asked for."""
    from graphc_runtime import artifact, plan_digest
    from graphc_runtime.model import array_bytes
    info = exe._info
    manifest = exe.manifest()
    sections = dict(info["sections"])
    from_graph = {}
    for k, c in enumerate(exe._native.constants):
        raw = array_bytes(c)
        digest = hashlib.sha256(raw).hexdigest()
        sections.pop(f"tensor/{digest}", None)
        if digest in tensors:
            from_graph[k] = digest
        else:
            sections[f"constant/{k}"] = raw
    for stage in ("graph", "optimized", "fused", "memory", "llvm"):
        sections[f"dump/{stage}"] = exe.dump(stage).encode()
    try:
        sections["cache/stats.json"] = json.dumps(exe.stats, default=json_default).encode()
        sections["cache/derived.json"] = json.dumps(info["derived"]()).encode()
        sections["cache/graph_constants.json"] = json.dumps(from_graph).encode()
        payload = artifact.encode(manifest, plan_digest.stamp_sections(manifest, sections))
    except (TypeError, ValueError):
        return                              # a stat or recipe JSON cannot hold: not kept
    cache_store.store(KIND, name, payload)


def load(name: str, graph, rebuild, recompile, tensors: dict):
    """The Executable entry `name` holds, bound to `graph`'s variables and to its arrays
    (`tensors`, from key()) for the constants the entry does not hold, or None (no
    entry, or one that does not check: it is removed). `recompile()` compiles the
    program without this cache (for dump("asm") and profile())."""
    from graphc_runtime import artifact, manifest as manifests, plan_digest
    from graphc_runtime.cpu import CpuProgram, Signature
    from graphc_runtime.dims import json_object_hook
    from graphc_runtime.errors import GraphcError
    from graphc_runtime.model import _MALFORMED, bytes_array, check_target
    from .executable import Executable
    from .ir import dtypes
    payload = cache_store.load(KIND, name)
    if payload is None:
        return None
    try:
        manifest, sections = artifact.parse(payload, LABEL)
        manifests.validate(manifest, LABEL)
        plan_digest.check(manifest, sections, LABEL)
        check_target(manifest, LABEL)
        signature = Signature.from_json(manifest["signature"])
        variables = {}
        for var, shape, dtype in signature.variables:
            value = graph.variables.get(var)
            if value is None or list(value.shape) != list(shape) or \
                    dtypes.canonical(value.dtype) != dtype:
                return None                     # the graph's variable is not what it was
            variables[var] = value
        from_graph = {int(k): d for k, d in
                      json.loads(sections["cache/graph_constants.json"]).items()}
        raw = [tensors[from_graph[k]] if k in from_graph else sections[f"constant/{k}"]
               for k in range(len(manifest["constants"]))]
        constants = [bytes_array(raw[k], tuple(shape), dtype, f"{LABEL}: constant {k}")
                     for k, (shape, dtype) in enumerate(manifest["constants"])]
        sections["object"] = plan_digest.stamp(sections["object"], bytes(32), "object")
        native = CpuProgram(sections["object"], signature, manifest["arena_bytes"],
                            variables, constants, manifest.get("collectives", []))
        stats = json.loads(sections["cache/stats.json"], object_hook=json_object_hook)
        derived = json.loads(sections["cache/derived.json"])
        dumps = {stage: sections[f"dump/{stage}"].decode()
                 for stage in ("graph", "optimized", "fused", "memory", "llvm")}
        held = {f"tensor/{from_graph.get(k) or manifest['sections'][f'constant/{k}']['sha256']}":
                raw[k] for k in range(len(manifest["constants"]))}
    except (GraphcError, UnicodeDecodeError, *_MALFORMED):      # checked, not trusted
        cache_store.remove(KIND, name)
        return None
    fresh = _Fresh(recompile)
    info = {"manifest": {k: v for k, v in manifest.items()
                         if k not in ("signature", "stats", "sections", "signed",
                                      "format_version")},
            "sections": {**{k: v for k, v in sections.items()
                            if not k.startswith(("constant/", "dump/", "cache/"))},
                         **held},             # the graphs' arrays a constant holds
            "derived": lambda: derived,
            "profile_object": lambda: fresh()._profile_object()}
    return Executable(native, rebuild, stats, dumps, device="cpu", module=fresh, info=info)


class _Fresh:
    """The program compiled again without the cache, when first needed: its module's
    assembly and its profiling build are the compiler's."""

    def __init__(self, recompile):
        self._recompile = recompile
        self._exe = None

    def __call__(self):
        if self._exe is None:
            self._exe = self._recompile()
        return self._exe

    def assembly(self) -> str:
        return self()._module.assembly()
