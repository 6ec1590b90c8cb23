"""ONNX ModelProto -> graphc Graph: inputs, initializers, nodes through the converters."""
from __future__ import annotations

import os

import numpy as np

import graphc as gc
from graphc_runtime.errors import GraphcError

from .dtypes import dtype_of, to_array
from .errors import NeedsInputShapes, NeedsInputValues, UnsupportedError

OLDEST_OPSET = 7

def _onnx():
    try:
        import onnx
    except ImportError as e:
        raise GraphcError(f"ONNX import needs the onnx package (the 'onnx' extra: pip "
                          f"install 'graphc[onnx]'): {e}") from None
    return onnx


def load(model_or_path):
    """A ModelProto from a ModelProto, a path or serialized bytes (GraphcError if it is
    not a readable ONNX model)."""
    onnx = _onnx()
    if isinstance(model_or_path, onnx.ModelProto):
        return model_or_path
    try:
        if isinstance(model_or_path, (bytes, bytearray)):
            model = onnx.load_from_string(bytes(model_or_path))
        elif isinstance(model_or_path, (str, os.PathLike)):
            if not os.path.exists(model_or_path):
                raise GraphcError(f"no such ONNX file: {model_or_path}")
            model = onnx.load(os.fspath(model_or_path))
        else:
            raise GraphcError(f"import_model takes an onnx.ModelProto, a path or bytes, got "
                              f"{type(model_or_path).__name__}")
    except GraphcError:
        raise
    except Exception as e:                  # protobuf's DecodeError and friends
        raise GraphcError(f"{model_or_path!s:.200}: not a readable ONNX model ({e})") from None
    if not model.graph.node and not model.graph.output:
        raise GraphcError("the ONNX model has an empty graph")
    return model


class ImportedModel:
    """The result of import_model: `.graph` (a gc.Graph), `.inputs` ({ONNX input name:
    placeholder}), `.outputs` ({ONNX output name: Tensor}), `.params` ({initializer name:
    variable}, with trainable=True), `.opset` (the default domain's version)."""

    def __init__(self, graph, inputs, outputs, params, opset):
        self.graph, self.inputs, self.outputs = graph, inputs, outputs
        self.params, self.opset = params, opset

    def __repr__(self) -> str:
        return (f"<ImportedModel opset {self.opset}: inputs {list(self.inputs)}, outputs "
                f"{list(self.outputs)}, {len(self.graph.nodes)} graphc nodes>")


class Context:
    """What a converter sees: the node, the opset, and helpers for its operands."""

    def __init__(self, graph, opset: int):
        self.graph, self.opset = graph, opset
        self.node = None

    def where(self) -> str:
        n = self.node
        label = f"node {n.name!r} " if n.name else ""
        return f"{label}({n.op_type}, opset {self.opset})"

    def unsupported(self, what: str) -> UnsupportedError:
        return UnsupportedError(f"{self.where()}: {what}")

    def tensor(self, value, dtype: str | None = None):
        """`value` as a Tensor of this graph (numpy values become constants)."""
        if isinstance(value, gc.Tensor):
            return value if dtype is None or value.dtype == dtype else gc.cast(value, dtype)
        arr = np.asarray(value)
        if dtype is not None:
            arr = arr.astype(gc.ir.dtypes.to_numpy(dtype))
        with self.graph:
            return gc.constant(arr)

    def static(self, value, what: str) -> np.ndarray:
        """`value` known at import time (a constant, or computed from constants only)."""
        if value is None:
            return None
        if not isinstance(value, gc.Tensor):
            return np.asarray(value)
        sources = [n for n in self.graph.ancestors([value.node])
                   if n.op in ("parameter", "variable")]
        fed = [n.attrs.get("name") for n in sources if n.op == "parameter"]
        if sources and len(fed) == len(sources):
            raise NeedsInputValues(
                f"{self.where()}: {what} must be known when the model is imported, but it "
                f"depends on input(s) {', '.join(map(repr, fed))}; import with "
                f"input_values={{{fed[0]!r}: ...}} to fix them", fed)
        if sources:
            raise self.unsupported(f"{what} must be known when the model is imported, but "
                                   f"it depends on {sources[0].op} "
                                   f"{sources[0].attrs.get('name')!r}")
        return np.asarray(gc.evaluate(value))


def import_model(model_or_path, trainable: bool = False, input_shapes: dict | None = None,
                 input_values: dict | None = None) -> ImportedModel:
    """Import an ONNX model. Initializers become constants, or variables (`.params`) with
    `trainable=True` (floating-point ones) so the model can be fine-tuned with gc.grad and
    gc.optim. `input_shapes` ({input name: shape}) fixes inputs whose dims are symbolic;
    `input_values` ({input name: array}) makes inputs constants of the graph (they are then
    not among `.inputs`), for shape-determining inputs (NeedsInputValues)."""
    onnx = _onnx()
    model = load(model_or_path)
    if not trainable:                    # trainable: keep the statistics as they are
        from .rewrites import fold_batch_norm
        model, _ = fold_batch_norm(model)
    opset = None
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx"):
            opset = o.version
    if opset is None:
        opset = 1
    newest = onnx.defs.onnx_opset_version()
    if not OLDEST_OPSET <= opset <= newest:
        raise UnsupportedError(f"the model's default-domain opset is {opset}; graphc imports "
                               f"opsets {OLDEST_OPSET} to {newest}")
    graph = gc.Graph(model.graph.name or "onnx")
    ctx = Context(graph, opset)
    env: dict = {}
    params, inputs = {}, {}
    initialized = set()
    with graph:
        for init in model.graph.initializer:
            try:
                arr = to_array(init)
            except Exception as e:              # external data missing, bad raw bytes
                raise GraphcError(f"initializer {init.name!r}: cannot read its data ({e})") \
                    from None
            dtype_of(init.data_type, f"initializer {init.name!r}")
            initialized.add(init.name)
            if trainable and arr.dtype.kind == "f":
                v = gc.variable(arr, name=init.name)
                env[init.name] = params[init.name] = v
            else:
                env[init.name] = arr
        shapes = dict(input_shapes or {})
        values = dict(input_values or {})
        for inp in model.graph.input:
            if inp.name in initialized:
                continue
            t = inp.type.tensor_type
            if not inp.type.HasField("tensor_type"):
                raise UnsupportedError(f"input {inp.name!r}: only tensor inputs are supported")
            dtype = dtype_of(t.elem_type, f"input {inp.name!r}")
            if inp.name in values:
                arr = np.asarray(values.pop(inp.name))
                env[inp.name] = arr.astype(gc.ir.dtypes.to_numpy(dtype), copy=False)
                shapes.pop(inp.name, None)
                continue
            if inp.name in shapes:
                shape = tuple(int(d) for d in shapes.pop(inp.name))
            elif not t.HasField("shape"):
                raise NeedsInputShapes(f"input {inp.name!r} declares no shape; give it with "
                                       f"import_model(..., input_shapes={{{inp.name!r}: "
                                       f"(...)}})", [inp.name])
            else:
                shape = []
                for d in t.shape.dim:
                    if d.HasField("dim_value"):
                        shape.append(d.dim_value)
                    else:
                        raise NeedsInputShapes(
                            f"input {inp.name!r} has a symbolic dimension "
                            f"{d.dim_param or '?'!r}; give its size with "
                            f"import_model(..., input_shapes={{{inp.name!r}: (...)}})",
                            [inp.name])
            inputs[inp.name] = env[inp.name] = gc.placeholder(tuple(shape), dtype, name=inp.name)
        if values:
            raise GraphcError(f"input_values names {', '.join(map(repr, values))}, which are "
                              f"not inputs of the model ({', '.join(inputs) or 'none'})")
        if shapes:
            raise GraphcError(f"input_shapes names {', '.join(map(repr, shapes))}, which are "
                              f"not inputs of the model ({', '.join(inputs) or 'none'})")
        for node in model.graph.node:
            _convert_node(ctx, node, env)
        outputs = {}
        for out in model.graph.output:
            if out.name not in env:
                raise GraphcError(f"graph output {out.name!r} is produced by no node")
            value = env[out.name]
            outputs[out.name] = ctx.tensor(value) if not isinstance(value, gc.Tensor) else value
    return ImportedModel(graph, inputs, outputs, params, opset)


def _convert_node(ctx, node, env, depth: int = 0):
    """Convert one ONNX node into env (its outputs by name); ops graphc has no converter
    for, but that the ONNX schema defines as a function, are inlined."""
    from . import functions, ops, ops_math, ops_nn, ops_resize  # noqa: F401  (registering)
    from .registry import CONVERTERS
    ctx.node = node
    if node.domain not in ("", "ai.onnx"):
        raise ctx.unsupported(f"custom domain {node.domain!r} is not supported")
    args = []
    for name in node.input:
        if name == "":
            args.append(None)
        elif name not in env:
            raise GraphcError(f"{ctx.where()}: input {name!r} is produced by no node, "
                              f"input or initializer of the model")
        else:
            args.append(env[name])
    convert = CONVERTERS.get(node.op_type)
    if convert is None:
        found = functions.body(node, ctx.opset, args) if depth < 8 else None
        if found is None:
            raise ctx.unsupported("this op is not supported")
        fn, version, schema = found
        outer = ctx.opset
        ctx.opset = version
        try:
            for inner in functions.inline(node, fn, schema, f"{node.name or node.op_type}#"
                                          f"{len(env)}"):
                _convert_node(ctx, inner, env, depth + 1)
        finally:
            ctx.opset = outer
        missing = [o for o in node.output if o and o not in env]
        if missing:
            ctx.node = node
            raise ctx.unsupported(f"output {missing[0]!r} is not produced by the op's "
                                  f"function body")
        return
    attrs = {a.name: _attribute(a) for a in node.attribute}
    narrow = _narrow_float(args) if node.op_type in ops.WIDENED else None
    if narrow:
        args = [gc.cast(a, "float32") if isinstance(a, gc.Tensor) and a.dtype == narrow
                else a for a in args]
    outs = convert(ctx, args, attrs)
    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    if narrow:
        outs = [gc.cast(o, narrow) if isinstance(o, gc.Tensor) and o.dtype == "float32"
                else o for o in outs]
    wanted = list(node.output)
    for name, value in zip(wanted, outs + [None] * (len(wanted) - len(outs))):
        if name == "":
            continue
        if value is None:
            raise ctx.unsupported(f"output {name!r} (optional output "
                                  f"#{wanted.index(name)}) is not supported")
        env[name] = _fold(ctx, value, args)


def _narrow_float(args):
    """The 16-bit float dtype of a composite op's tensor operands, if any: such ops compute
    in float32 and round once, as the ONNX reference and onnxruntime do."""
    for a in args:
        if isinstance(a, gc.Tensor) and a.dtype in ("float16", "bfloat16"):
            return a.dtype
    return None


def _attribute(a):
    from onnx import helper
    value = helper.get_attribute_value(a)
    if a.type == a.TENSOR:
        return to_array(value)
    if a.type == a.GRAPH or a.type == a.GRAPHS:
        return value                     # If/Loop/Scan bodies: refused by the converters
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, list) and value and isinstance(value[0], bytes):
        return [v.decode() for v in value]
    return value


def _fold(ctx, value, args):
    """A result computed from static operands only becomes static itself (shape
    sub-graphs fold at import); small results only, so weights stay as one constant."""
    if isinstance(value, gc.Tensor) and all(not isinstance(a, gc.Tensor) for a in args
                                            if a is not None) and value.size <= 4096:
        return ctx.static(value, "a constant sub-expression")
    return value


def compile(model_or_path, device: str = "cpu", input_shapes: dict | None = None,
            input_values: dict | None = None, **compile_options):  # noqa: A001
    """Import and compile: an Executable fed by the ONNX input names (keywords, or
    positionally in the model's input order) returning {ONNX output name: array}."""
    imported = import_model(model_or_path, input_shapes=input_shapes,
                            input_values=input_values)
    with imported.graph:
        return gc.compile(dict(imported.outputs), inputs=list(imported.inputs.values()),
                          device=device, **compile_options)
