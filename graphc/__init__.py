"""graphc: a static-graph tensor compiler.

Build a graph with placeholders, constants and variables; differentiate it with
`grad`; run it with the reference interpreter (`evaluate`).
"""
from .backends.llvm.features import require_supported_llvmlite

require_supported_llvmlite()

from graphc_runtime.dims import Dim, Undecidable
from graphc_runtime.errors import (ArtifactError, CompileError, DeviceError, DTypeError,
                                   FeedError, GraphcError, ShapeError)

from . import random
from .api import Tensor, as_tensor, constant, evaluate, placeholder, variable
from .functions import *  # noqa: F401,F403
from .ir import Graph, reset_default_graph
from .ir.dtypes import ALL_DTYPES as dtypes_supported

__version__ = "0.1.0"

bool_, int32, int64 = "bool", "int32", "int64"
float16, bfloat16, float32, float64 = "float16", "bfloat16", "float32", "float64"

from .autodiff import grad, vjp  # noqa: E402
from .checkpoint import checkpoint  # noqa: E402
from .control import cond, fori_loop, scan, while_loop  # noqa: E402
from . import nn, optim  # noqa: E402
from .compiler import compile  # noqa: E402,A001
from .function import function  # noqa: E402
from .executable import Executable  # noqa: E402
from .devices import DeviceArray, cuda, devices, to_device  # noqa: E402
from . import distributed  # noqa: E402
from . import extend  # noqa: E402


def __getattr__(name):
    """gc.onnx without an explicit `import graphc.onnx` (it needs the onnx extra, so it is
    imported on first use only)."""
    if name == "onnx":
        import importlib
        return importlib.import_module(".onnx", __name__)
    raise AttributeError(f"module 'graphc' has no attribute {name!r}")
