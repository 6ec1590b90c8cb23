"""Narrow integer and 16-bit float types of an imported model's values.

graphc computes 8-, 16- and 32-bit integers in int32 (uint32 in int64): each value of
such an ONNX type is recorded (`Context.narrow`) and wrapped back into its range after
every op that can leave it, as onnxruntime's two's-complement arithmetic does. Element
types come from ONNX's shape inference where it runs, else from the values themselves.
"""
from __future__ import annotations

import numpy as np

import graphc as gc

from . import dtypes as odt
from .limits import inference_safe

# ops whose result holds only values of their operands: no wrap into a narrow type needed
VALUE_PRESERVING = {"Identity", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten",
                    "Concat", "Split", "Slice", "Gather", "GatherElements", "GatherND",
                    "Expand", "Tile", "Max", "Min", "Relu", "Where", "ReduceMax",
                    "ReduceMin", "Pad", "Constant", "ScatterElements", "ScatterND",
                    "DepthToSpace", "SpaceToDepth", "Trilu", "Resize", "MaxPool", "TopK",
                    "Clip", "Dropout", "BitwiseAnd", "BitwiseOr", "BitwiseXor"}
# ops whose integer results are indices or counts, never of their operands' type
INDEX_RESULTS = {"Shape", "Size", "ArgMax", "ArgMin", "NonZero", "Range"}


def inferred_types(model) -> dict:
    """Element types of the model's values by ONNX shape inference ({} where it fails,
    or where the model holds values that crash it)."""
    if not inference_safe(model.graph):
        return {}
    try:
        import onnx
        inferred = onnx.shape_inference.infer_shapes(_weights_declared(model))
    except Exception:                  # inference is a help, not a requirement
        return {}
    types = {}
    for vi in list(inferred.graph.value_info) + list(inferred.graph.output):
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type:
            types[vi.name] = vi.type.tensor_type.elem_type
    return types


DECLARED_BYTES = 1 << 10      # initializers larger than this go to inference as inputs


def _weights_declared(model):
    """A copy of the model whose large initializers are graph inputs of their type and
    shape, without their bytes: shape inference serializes the model it is given (28 MB
    for the ConvNeXt-style benchmark model: 0.06 s), and no element type depends on a
    weight's values. Small ones (shapes, axes) keep their values."""
    import onnx
    graph = model.graph
    large = [t.ByteSize() > DECLARED_BYTES for t in graph.initializer]
    if not any(large):
        return model
    light = onnx.ModelProto()
    light.CopyFrom(model)
    g = light.graph
    declared = {i.name for i in g.input}
    del g.initializer[:]
    for t, big in zip(graph.initializer, large):
        if not big:
            g.initializer.append(t)              # copied into the light model
        elif t.name not in declared:
            g.input.append(onnx.helper.make_tensor_value_info(t.name, t.data_type,
                                                              list(t.dims)))
    return light


def narrow_type(ctx, node, name, value, attrs):
    """The narrow integer ONNX type output `name` has, or None."""
    if name in ctx.inferred:
        t = ctx.inferred[name]
        return t if t in odt.NARROW else None
    if isinstance(value, np.ndarray) and value.dtype.name in odt.NARROW_NUMPY:
        return odt.NARROW_NUMPY[value.dtype.name]
    if node.op_type == "Cast":
        return attrs["to"] if attrs["to"] in odt.NARROW else None
    if node.op_type == "CastLike":
        return ctx.operand_types[1] if len(ctx.operand_types) > 1 else None
    if node.op_type in INDEX_RESULTS:
        return None
    dtype = value.dtype if isinstance(value, gc.Tensor) else np.asarray(value).dtype.name
    for t in ctx.operand_types:
        if t is not None and odt.compute_dtype(t) == dtype:
            return t
    return None


def narrowed(ctx, node, name, value, attrs):
    """`value` wrapped into its narrow integer type's range (and recorded as of that type),
    or as it is."""
    if isinstance(value, np.ndarray) and value.dtype.kind in "iu" and \
            value.dtype.name not in ("int32", "int64") and value.dtype.name not in \
            odt.NARROW_NUMPY:
        raise ctx.unsupported(f"output {name!r} has element type {value.dtype} "
                              f"(graphc computes in int32/int64 for 8-, 16- and 32-bit ones)")
    t = narrow_type(ctx, node, name, value, attrs)
    if t is None:
        return value
    ctx.narrow[name] = t
    if isinstance(value, np.ndarray):
        return odt.wrap(value, t)
    if value.dtype != odt.compute_dtype(t):
        value = gc.cast(value, odt.compute_dtype(t))
    elif node.op_type in VALUE_PRESERVING:
        return value
    return odt.wrap(value, t)


def narrow_float(args):
    """The 16-bit float dtype of a composite op's tensor operands, if any: such ops compute
    in float32 and round once, as the ONNX reference and onnxruntime do."""
    for a in args:
        if isinstance(a, gc.Tensor) and a.dtype in ("float16", "bfloat16"):
            return a.dtype
    return None
