"""The Backend contract and the registry of backends by device kind.

A backend is a class registered under a device kind ("cpu", "cuda"); `gc.compile(...,
device="kind[:N]")` makes one per compilation with the device's index and the compile
options, then asks it, in order: its graph passes (`lowering_passes`, run in their place
in passes.pipeline), its scheduling answers (`policy`, a SchedulePolicy) and, given the
lowered program, its native program (`build`). Adding a backend is one package with a
Backend subclass and one `register_backend` call (docs/extending.md).
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Callable

from graphc_runtime.errors import CompileError, DeviceError

from ..schedule.policy import SchedulePolicy


@dataclass
class Build:
    """What the driver hands a backend to build: the program after the passes, its
    fusion plan, its kernels (`lowered`), the runtime's signature of its inputs and
    outputs, and `seconds`, where the backend adds its stages' compile times."""
    name: str
    graph: object
    program: object
    plan: object
    lowered: object
    signature: object
    seconds: dict


@dataclass
class Built:
    """A backend's result: the runtime program (`native`, with `run`), how many kernels
    it launches, the code dumps it offers (llvm= or ptx=), what it adds to stats, the
    target it was built for and the artifact's code sections."""
    native: object
    kernels: int
    dumps: dict
    target: dict
    code: dict
    stats: dict = field(default_factory=dict)
    manifest: dict = field(default_factory=dict)
    module: object = None                     # the CPU's NativeModule (dump llvm/asm)
    profile_object: Callable | None = None    # builds the profiling variant's object code


class Backend:
    """One compilation for one device. Subclasses set `kind` and `options` (the compile
    options they read) and override the three steps."""
    kind = ""
    options: frozenset = frozenset()

    def __init__(self, index: int | None, options: dict, loc: str | None = None):
        self.index = index
        self.opts = options
        self.loc = loc

    @property
    def device(self) -> str:
        """The device's canonical name (Executable.device)."""
        return self.kind if self.index is None else f"{self.kind}:{self.index}"

    def lowering_passes(self) -> list:
        """The backend's own graph passes, (name, function) pairs run after CSE."""
        return []

    def policy(self) -> SchedulePolicy:
        return SchedulePolicy(fuse=self.opts.get("fuse", True))

    def build(self, job: Build) -> Built:
        """Native code for job.lowered: every backend defines its own."""
        raise NotImplementedError(f"backend {type(self).__name__} defines no build()")


_REGISTRY: dict[str, object] = {
    # built in, imported when first asked for (the CUDA emitter only by CUDA programs)
    "cpu": "graphc.backends.cpu.backend:CpuBackend",
    "cuda": "graphc.backends.cuda.backend:CudaBackend",
}


def register_backend(kind: str, backend: type) -> None:
    """Make `gc.compile(..., device=kind)` (or kind:N) use `backend`, a Backend subclass."""
    if not (isinstance(backend, type) and issubclass(backend, Backend)):
        raise TypeError(f"register_backend: {backend!r} is not a Backend subclass")
    if not kind.isidentifier():
        raise ValueError(f"register_backend: device kind {kind!r} is not a name")
    _REGISTRY[kind] = backend


def backends() -> list[str]:
    """The registered device kinds."""
    return sorted(_REGISTRY)


def backend_class(kind: str) -> type:
    entry = _REGISTRY[kind]
    if isinstance(entry, str):
        module, _, name = entry.partition(":")
        entry = _REGISTRY[kind] = getattr(importlib.import_module(module), name)
    return entry


def backend_for(device, options: dict, loc: str | None = None,
                common=frozenset()) -> Backend:
    """The backend compiling for `device` ('cpu', 'cuda', 'cuda:1', ...) with `options`
    (the backend's own and the driver's, `common`)."""
    name = str(device)
    kind, colon, index = name.partition(":")
    if kind not in _REGISTRY or (colon and not index.isdigit()):
        raise DeviceError(f"unknown device {name!r}; devices are "
                          f"{', '.join(k + ('' if k == 'cpu' else '[:N]') for k in backends())}",
                          loc)
    cls = backend_class(kind)
    unknown = set(options) - cls.options - set(common)
    if unknown:
        raise CompileError(f"unknown compile option(s) for device {kind}: "
                           f"{', '.join(sorted(unknown))}; known: "
                           f"{', '.join(sorted(cls.options | set(common)))}", loc)
    return cls(int(index) if colon else None, options, loc)
