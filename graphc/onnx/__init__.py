"""ONNX import: models from PyTorch, TensorFlow, scikit-learn... into graphc graphs.

`import_model(m)` maps an ONNX ModelProto (or a path, or serialized bytes) onto graphc's
primitives: placeholders for the graph inputs, constants (or variables, trainable=True)
for the initializers, one converter per ONNX op (graphc/onnx/ops*.py). Values known at
import (shape sub-graphs such as Shape -> Gather -> Concat -> Reshape) fold to numpy
constants. `compile(m)` compiles the imported graph; `graphc.onnx.backend` is an
onnx.backend for the ONNX conformance runner. Needs the `onnx` extra.
"""
from .errors import ModelError, NeedsInputShapes, NeedsInputValues, UnsupportedError
from .importer import ImportedModel, compile, import_model  # noqa: A004

__all__ = ["ImportedModel", "ModelError", "NeedsInputShapes", "NeedsInputValues", "UnsupportedError",
           "compile", "import_model"]
