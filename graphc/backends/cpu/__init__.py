"""Lowering of kernel IR to LLVM IR for the host CPU (llvmlite).

One module, one entry function `graphc_main(i8** table)`: table[0] is the arena, the
other slots hold external buffers (inputs, outputs, variables, constants). Each kernel
is an internal function over typed `noalias` pointers with plain counted loops whose
innermost dimension is contiguous, so LLVM's loop vectorizer can widen them.
float16/bfloat16 are storage types (math in float32, rounded after each operation, as the
reference does); bool is stored as one byte.
"""
import importlib

_EXPORTS = {"scratch_buffers": "dot_plan", "Emitter": "emitter", "ModuleBuilder": "module",
            "NativeModule": "native_module", "aliased_buffers": "module", "chain_plan": "module",
            "emit_module": "module", "split_var": "parallel"}
__all__ = sorted(_EXPORTS)


def __getattr__(name):
    """The code generator's names, imported when first used (a program cache hit
    needs none of them)."""
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
