"""Executable: a compiled program, callable like a function."""
from __future__ import annotations

from graphc_runtime.errors import CompileError

STAGES = ("graph", "optimized", "fused", "memory", "llvm", "asm", "ptx")


class Executable:
    """`exe(*inputs, **inputs)` runs one step and returns the outputs' structure."""

    def __init__(self, native, rebuild, stats: dict, dumps: dict, device: str, module=None,
                 info=None):
        self._native = native
        self._rebuild = rebuild
        self.stats = stats
        self._dumps = dumps
        self.device = device
        self._module = module
        self._info = info

    def __call__(self, *args, **kwargs):
        return self._rebuild(self._native.run(args, kwargs))

    def __repr__(self) -> str:
        return (f"<Executable {self.device}: inputs {self.input_names}, "
                f"{self.stats['kernels']} kernels>")

    @property
    def variables(self) -> dict:
        """Current values of the variables (live arrays; updated in place by each call)."""
        return self._native.variables

    def share_variables(self, other: "Executable") -> None:
        """Read and write `other`'s variables (those of the same names) instead of this
        executable's own copies: several programs over one model's state."""
        adopt = getattr(self._native, "adopt_variables", None)
        if adopt is None or not hasattr(other._native, "adopt_variables"):
            raise CompileError(f"share_variables: only CPU executables share variables "
                               f"(this one runs on {self.device})")
        adopt({name: dict.__getitem__(other.variables, name) for name in other.variables})

    @property
    def input_names(self) -> list:
        return [e[0] for e in self._native.signature.inputs]

    def dump(self, stage: str = "optimized") -> str:
        """Text of one compilation stage: graph, optimized, fused, memory, llvm, asm, ptx."""
        if stage not in STAGES:
            raise CompileError(f"unknown stage {stage!r}; stages: {', '.join(STAGES)}")
        if stage == "ptx" and "ptx" not in self._dumps:
            raise CompileError(f"no PTX: this executable was compiled for {self.device}")
        if stage in ("asm", "llvm") and self._module is None:
            raise CompileError(f"no {stage}: this executable was compiled for {self.device} "
                               f"(see dump('ptx'))")
        if stage == "asm":
            return self._module.assembly()
        return self._dumps[stage]

    def manifest(self) -> dict:
        """What an artifact of this executable records (signature, target, memory plan,
        scalar stats...)."""
        if self._info is None:
            raise CompileError(f"saving {self.device} executables is not supported yet")
        return dict(self._info["manifest"], signature=self._native.signature.to_json(),
                    stats={k: v for k, v in self.stats.items()
                           if isinstance(v, (int, float, str))})

    def viz(self, path: str) -> str:
        """Write the interactive viewer page (.html: the graph as built, the optimized
        graph and the fused kernels, with the memory plan) or a Graphviz drawing (.dot);
        returns `path`."""
        import os
        from . import viewer, viz
        ext = os.path.splitext(str(path))[1].lower()
        if ext == ".html":
            text = viewer.executable_page(self)
        elif ext == ".dot":
            manifest = self.manifest()
            sections = self._info["sections"]
            import json
            text = viz.to_dot(viz.ProgramView(sections["graph.json"].decode(),
                                              json.loads(sections["fusion.json"]),
                                              manifest["memory"],
                                              manifest.get("graph_name", "graph")))
        else:
            raise CompileError(f"viz writes .html or .dot, not {ext or 'a path without an '}"
                               f"{'' if ext else 'extension'}")
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        return str(path)

    def profile(self, repeat: int = 10, **feeds):
        """Per-kernel times of `repeat` calls with `feeds`, from a profiling build of
        this program (timestamps around each kernel and thread chunk, compiled once on
        first use; this executable's own code is unchanged): a graphc_runtime.profile
        Profile with `.rows`, `.table()`, `.trace()` and `.save_trace(path)`. The
        variables are left as they were."""
        from graphc_runtime.profile import profile_cuda, profile_program
        if self.device.startswith("cuda") and self._info is not None:
            return profile_cuda(self._native, self.manifest(), repeat, (), feeds)
        if self._info is None or "profile_object" not in self._info:
            raise CompileError(f"profiling {self.device} executables is not supported yet")
        return profile_program(self._native, self._profile_object(), self.manifest(),
                               repeat, (), feeds)

    def _profile_object(self) -> bytes:
        if "profile_object_code" not in self._info:
            self._info["profile_object_code"] = bytes(self._info["profile_object"]())
        return self._info["profile_object_code"]

    def save(self, path: str, key=None) -> None:
        """Write the compiled program and its current variables as an artifact that
        `graphc_runtime.load` runs without the compiler; with `key` (bytes, at least 16)
        the file is signed, and loading it with the same key verifies it."""
        from graphc_runtime.model import save_program
        manifest = self.manifest()
        if "derived" in self._info:
            if "derived_constants" not in self._info:
                self._info["derived_constants"] = self._info["derived"]()
            if self._info["derived_constants"]:
                manifest["derived"] = self._info["derived_constants"]
        if manifest["structure"] is None:
            raise CompileError("cannot save: the outputs are a dict with non-string keys")
        sections = dict(self._info["sections"])
        if "profile_object" in self._info:      # so `graphc profile` runs on the artifact
            sections["object_profile"] = self._profile_object()
        stages = ("graph", "optimized", "fused", "memory") + \
            (("ptx",) if "ptx" in self._dumps else ("llvm", "asm"))
        for stage in stages:
            sections[f"dump/{stage}"] = self.dump(stage).encode()
        save_program(path, manifest, sections, dict(self._native.variables),
                     self._native.constants, key=key)
