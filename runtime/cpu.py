"""The CPU executor: JIT-compiles an executable's LLVM module and runs it.

It owns the arena (64-byte aligned), the variables and the constants, checks and binds
the inputs, and runs the whole program with one native call. Calls are serialized by a
lock (variables are updated in place), so an executable is safe to share between threads.
"""
from __future__ import annotations

import ctypes
import threading

import numpy as np

from .errors import CompileError, DeviceError, FeedError
from .feeds import bind_inputs, check_array

_llvm_ready = False
_llvm_lock = threading.Lock()


def llvm():
    """llvmlite.binding, initialized once for the native target."""
    global _llvm_ready
    import llvmlite.binding as binding
    with _llvm_lock:
        if not _llvm_ready:
            binding.initialize_native_target()
            binding.initialize_native_asmprinter()
            _llvm_ready = True
    return binding


def host_target_machine(opt: int = 3):
    b = llvm()
    target = b.Target.from_default_triple()
    return target.create_target_machine(cpu=b.get_host_cpu_name(),
                                        features=_features(b),
                                        opt=opt, reloc="default", codemodel="jitdefault")


def _features(b) -> str:
    """Host CPU features; with AVX-512, let the vectorizer use the full 512-bit width."""
    features = b.get_host_cpu_features().flatten()
    if "+avx512f" in features.split(","):
        features += ",-prefer-256-bit"
    return features


def aligned_empty(nbytes: int, align: int = 64) -> np.ndarray:
    raw = np.empty(nbytes + align, np.uint8)
    start = (-raw.ctypes.data) % align
    return raw[start:start + nbytes]


class VariableStore(dict):
    """name -> live array of an executable's variables. Assigning copies the new value
    into the existing array (after checking shape and dtype), so compiled code that holds
    the array's address keeps seeing the current value."""

    def __setitem__(self, name, value):
        if name not in self:
            raise KeyError(f"no variable {name!r}; variables: {', '.join(self)}")
        current = dict.__getitem__(self, name)
        value = np.asarray(value)
        if value.shape != current.shape or value.dtype != current.dtype:
            raise FeedError(f"variable {name!r}: expected shape {current.shape} and dtype "
                            f"{current.dtype}, got {value.shape} {value.dtype}")
        current[...] = value

    def update(self, *args, **kwargs):
        for k, v in dict(*args, **kwargs).items():
            self[k] = v

    def __delitem__(self, name):
        raise TypeError("variables cannot be removed from a compiled executable")

    def pop(self, *args):
        raise TypeError("variables cannot be removed from a compiled executable")


class Signature:
    """Names, shapes and dtypes of an executable's inputs, outputs and variables.

    Each entry is (name, shape, numpy dtype, graphc dtype name, printed type).
    """

    def __init__(self, inputs, outputs, variables):
        self.inputs, self.outputs, self.variables = inputs, outputs, variables


class CpuProgram:
    """A JIT-compiled program: `run(args, kwargs)` -> list of output arrays."""

    def __init__(self, llvm_ir: str, signature: Signature, arena_bytes: int,
                 variables: dict, constants: list, opt_level: int = 3):
        b = llvm()
        self.signature = signature
        self.llvm_ir = llvm_ir
        try:
            module = b.parse_assembly(llvm_ir)
            module.verify()
        except RuntimeError as e:
            raise CompileError(f"generated LLVM IR is invalid: {e}") from None
        self.target_machine = host_target_machine(opt_level)
        if opt_level > 0:
            pto = b.create_pipeline_tuning_options(speed_level=opt_level)
            pto.loop_vectorization = True
            pto.slp_vectorization = True
            pb = b.create_pass_builder(self.target_machine, pto)
            pb.getModulePassManager().run(module, pb)
        self.optimized_ir = str(module)
        self.engine = b.create_mcjit_compiler(module, self.target_machine)
        self.engine.finalize_object()
        self.asm = None
        self._module = module
        address = self.engine.get_function_address("graphc_main")
        if not address:
            raise CompileError("the compiled module has no graphc_main")
        self._main = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(address)
        self.arena = aligned_empty(max(arena_bytes, 64))
        self.variables = VariableStore({name: np.array(variables[name], order="C", copy=True)
                                        for name, *_ in signature.variables})
        self.constants = [np.ascontiguousarray(c) for c in constants]
        self.poison_arena = False
        self.lock = threading.Lock()
        n = 1 + len(signature.inputs) + len(signature.outputs) + len(signature.variables) + \
            len(self.constants)
        self._table = (ctypes.c_void_p * n)()
        self._n_in = len(signature.inputs)
        self._names = [e[0] for e in signature.inputs]

    def assembly(self) -> str:
        if self.asm is None:
            self.asm = self.target_machine.emit_assembly(self._module)
        return self.asm

    def run(self, args: tuple, kwargs: dict) -> list:
        values = bind_inputs(self._names, args, kwargs)
        arrays = []
        for value, (name, shape, npd, dname, tstr) in zip(values, self.signature.inputs):
            a = check_array(name, value, shape, npd, dname, tstr)
            arrays.append(np.ascontiguousarray(a))
        outs = [np.empty(shape, npd) for _, shape, npd, _, _ in self.signature.outputs]
        with self.lock:
            table = self._table
            if self.poison_arena:
                self.arena.fill(0xFF)          # NaN in every float format
            table[0] = self.arena.ctypes.data
            k = 1
            for a in arrays + outs:
                table[k] = a.ctypes.data
                k += 1
            for name, *_ in self.signature.variables:
                table[k] = self.variables[name].ctypes.data
                k += 1
            for c in self.constants:
                table[k] = c.ctypes.data
                k += 1
            self._main(ctypes.cast(table, ctypes.c_void_p))
        return outs


def require_cpu(device: str) -> None:
    if device not in ("cpu", "cpu:0"):
        raise DeviceError(f"device {device!r} is not a CPU")
