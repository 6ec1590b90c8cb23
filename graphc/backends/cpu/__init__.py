"""Lowering of kernel IR to LLVM IR for the host CPU (llvmlite).

One module, one entry function `graphc_main(i8** table)`: table[0] is the arena, the
other slots hold external buffers (inputs, outputs, variables, constants). Each kernel
is an internal function over typed `noalias` pointers with plain counted loops whose
innermost dimension is contiguous, so LLVM's loop vectorizer can widen them.
float16/bfloat16 are storage types (math in float32, rounded after each operation, as the
reference does); bool is stored as one byte.
"""
from .dot_plan import scratch_buffers
from .emitter import Emitter
from .module import ModuleBuilder, NativeModule, aliased_buffers, chain_plan, emit_module
from .parallel import split_var

__all__ = ["Emitter", "ModuleBuilder", "NativeModule", "aliased_buffers", "chain_plan",
           "emit_module", "scratch_buffers", "split_var"]
