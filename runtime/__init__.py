"""graphc_runtime: runs compiled graphc programs without importing the compiler."""
from .errors import (ArtifactError, CompileError, DeviceError, DTypeError, FeedError,
                     GraphcError, ShapeError)
from .model import Model, load

__version__ = "0.1.0"

__all__ = ["ArtifactError", "CompileError", "DeviceError", "DTypeError", "FeedError",
           "GraphcError", "Model", "ShapeError", "load", "__version__"]
