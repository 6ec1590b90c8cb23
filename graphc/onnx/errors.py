"""ONNX import errors."""
from __future__ import annotations

from graphc_runtime.errors import GraphcError


class UnsupportedError(GraphcError):
    """The model uses an op, attribute value, dtype, opset or domain graphc cannot import
    (yet); the message names the node, the op, the opset and what is missing."""


class NeedsInputValues(UnsupportedError):
    """A shape-determining operand (Reshape's shape, Reduce*'s axes, Slice's starts...)
    depends on model inputs, so the graph's shapes are only known once their values are:
    `inputs` names them. Import again with `import_model(..., input_values={name: array})`;
    graphc.onnx.backend does so itself, compiling once per distinct value."""

    def __init__(self, message: str, inputs):
        super().__init__(message)
        self.inputs = tuple(inputs)


class NeedsInputShapes(UnsupportedError):
    """A model input has symbolic (or undeclared) dimensions: `inputs` names them. Import
    with `import_model(..., input_shapes={name: shape})`; graphc.onnx.backend does so
    itself, compiling once per distinct set of shapes."""

    def __init__(self, message: str, inputs):
        super().__init__(message)
        self.inputs = tuple(inputs)


class ModelError(GraphcError, ValueError):
    """The model is malformed or hostile: an attribute or operand out of its range (a
    stride of 0, a Slice step of 0, a Reshape 0 past the input's rank) or a size no
    machine can hold; the message names the node."""
