"""ONNX ModelProto -> graphc Graph: inputs, initializers, nodes through the converters."""
from __future__ import annotations

import os

import numpy as np

import graphc as gc
from graphc_runtime.errors import GraphcError

from . import dtypes as odt
from . import functions
from . import ops
from . import (ops_control, ops_math, ops_nn, ops_pool, ops_quant,  # noqa: F401 (they
               ops_resize, ops_rnn, ops_shape, ops_signal)           # register converters)
from .dtypes import dtype_of, to_array
from graphc_runtime.dims import Undecidable, is_symbolic

from graphc.ir.dtypes import to_numpy as dtypes_to_numpy
from graphc.ir.source import located

from .errors import NeedsInputShapes, NeedsInputValues, UnsupportedError
from .limits import converted
from .narrow import inferred_types, narrow_float, narrowed

# graphc's converters implement each op from opset 7 on; older opsets import where the op
# is the same version there as in opset 7
OLDEST_OPSET = 1
IMPLEMENTED_FROM = 7

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
    variable}, with trainable=True), `.opset` (the default domain's version) and
    `.onnx_dtypes` ({input or output name: numpy dtype} for the 8/16/32-bit integers that
    graphc holds in int32/int64)."""

    def __init__(self, graph, inputs, outputs, params, opset, onnx_dtypes=None):
        self.graph, self.inputs, self.outputs = graph, inputs, outputs
        self.params, self.opset = params, opset
        self.onnx_dtypes = dict(onnx_dtypes or {})

    def __repr__(self) -> str:
        return (f"<ImportedModel opset {self.opset}: inputs {list(self.inputs)}, outputs "
                f"{list(self.outputs)}, {len(self.graph.nodes)} graphc nodes>")


class Context:
    """What a converter sees: the node, the opset, and helpers for its operands."""

    def __init__(self, graph, opset: int, inferred=None, label: str = "onnx"):
        self.graph, self.opset = graph, opset
        self.node = None
        self.narrow: dict = {}          # value name -> its narrow ONNX integer type
        self.inferred = dict(inferred or {})   # value name -> ONNX element type
        self.label = label                     # the model file (or graph) nodes come from
        self.initializers: dict = {}           # id(array) -> (array, initializer name)
        self.named_constants: dict = {}        # initializer name -> its constant Tensor
        self.operand_types: list = []   # the current node's operands' narrow types (or None)
        self.env: dict = {}             # the values visible to the current node, by name
        self.dequantized: dict = {}     # value name of a DequantizeLinear result -> what
        # it was made of (int8_products.Dequantized): its products multiply integers
        self.quantized: dict = {}       # value name of a QuantizeLinear result -> (its
        # rounded quotient, type, axis, (scale, zero point)): a DequantizeLinear of it
        # with the same scale and zero point stays in float (ops_quant._requantized)

    def where(self) -> str:
        n = self.node
        label = f"node {n.name!r} " if n.name else ""
        return f"{label}({n.op_type}, opset {self.opset})"

    def convert_nodes(self, nodes, env: dict) -> None:
        """Convert ONNX nodes into `env` (a loop or branch body's, see ops_control)."""
        for node in nodes:
            _convert_node(self, node, env)

    def unsupported(self, what: str) -> UnsupportedError:
        return UnsupportedError(f"{self.where()}: {what}")

    def tensor(self, value, dtype: str | None = None):
        """`value` as a Tensor of this graph (numpy values become constants)."""
        if isinstance(value, gc.Tensor):
            return value if dtype is None or value.dtype == dtype else gc.cast(value, dtype)
        arr = np.asarray(value)
        if arr.dtype == object:            # sizes, some symbolic: their values at the call
            dt = dtype or "int64"
            with self.graph:
                parts = [gc.dim_size(d, dt) for d in arr.reshape(-1)]
                flat = gc.stack(parts) if parts else gc.constant(np.zeros(0, np.int64))
                return flat.reshape(arr.shape)
        known = self.initializers.get(id(value))
        if known is not None and known[0] is value and (dtype is None or
                                                         arr.dtype == dtypes_to_numpy(dtype)):
            name = known[1]              # an initializer: one constant, named after it
            if name not in self.named_constants:
                with located(_initializer_location(self.label, name)):
                    self.named_constants[name] = gc.constant(
                        arr, graph=self.graph, name=self.graph.unique_name(name))
            return self.named_constants[name]
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
        sources = [n for n in value.graph.ancestors([value.node])
                   if n.op in ("parameter", "variable")]
        if sources and value.graph is not self.graph:
            raise self.unsupported(f"{what} must be known when the model is imported, but "
                                   f"inside this loop or branch body it depends on the "
                                   f"body's inputs")
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
                 input_values: dict | None = None, symbolic: bool = True,
                 tie_shared: bool = False) -> ImportedModel:
    """Import an ONNX model. Initializers become constants, or variables (`.params`) with
    `trainable=True` (floating-point ones) so the model can be fine-tuned with gc.grad and
    gc.optim. An input's symbolic dims ("batch_size", or unnamed) become graphc's symbolic
    dimensions (one compile for every size); a model whose shape computations need a
    concrete size raises NeedsInputShapes, as does any symbolic dim with `symbolic=False`.
    `input_shapes` ({input name: shape}) fixes inputs' sizes; `input_values` ({input name:
    array}) makes inputs constants of the graph (they are then not among `.inputs`), for
    shape-determining inputs (NeedsInputValues).

    With `trainable=True`, an initializer that several nodes read becomes one variable per
    reading node (`name`, `name.1`, `name.2`...): exporters merge initializers that are
    equal (every LayerNorm's weight of ones), and the layers they came from were separate
    parameters; `tie_shared=True` keeps one variable for all. BatchNormalization's running
    mean and variance stay constants (inference statistics, not parameters)."""
    onnx = _onnx()
    model = load(model_or_path)
    if not trainable:                    # trainable: keep the statistics as they are
        from .rewrites import fold_batch_norm
        model, _ = fold_batch_norm(model)
    opset = None
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx"):
            opset = o.version
    if opset is None:                   # no default-domain import: nodes name their domains
        opset = onnx.defs.onnx_opset_version() if all(
            n.domain not in ("", "ai.onnx") for n in model.graph.node) else 1
    newest = onnx.defs.onnx_opset_version()
    if not OLDEST_OPSET <= opset <= newest:
        raise UnsupportedError(f"the model's default-domain opset is {opset}; graphc imports "
                               f"opsets {OLDEST_OPSET} to {newest}")
    graph = gc.Graph(model.graph.name or "onnx")
    label = os.path.basename(os.fspath(model_or_path)) if isinstance(
        model_or_path, (str, os.PathLike)) else (model.graph.name or "onnx")
    ctx = Context(graph, opset, inferred_types(model), label)
    onnx_dtypes: dict = {}
    env: dict = {}
    params, inputs = {}, {}
    initialized = set()
    reads = {}                            # initializer name -> top-level nodes reading it
    statistics = set()                    # BatchNormalization's running mean and variance
    for node in model.graph.node:
        for k, name in enumerate(node.input):
            reads[name] = reads.get(name, 0) + 1
            if node.op_type == "BatchNormalization" and k in (3, 4):
                statistics.add(name)
    statistics -= {n.input[k] for n in model.graph.node if n.op_type != "BatchNormalization"
                   for k in range(len(n.input))}
    untied = {}                           # shared name -> {"value", "readers" so far}
    with graph:
        for init in model.graph.initializer:
            try:
                arr = to_array(init)
            except Exception as e:              # external data missing, bad raw bytes
                raise GraphcError(f"initializer {init.name!r}: cannot read its data ({e})") \
                    from None
            dtype_of(init.data_type, f"initializer {init.name!r}")
            if init.data_type in odt.NARROW:
                arr = odt.wrap(arr, init.data_type)
                ctx.narrow[init.name] = init.data_type
            initialized.add(init.name)
            if trainable and arr.dtype.kind == "f" and init.name not in statistics:
                with located(_initializer_location(label, init.name)):
                    v = gc.variable(arr, name=init.name)
                env[init.name] = params[init.name] = v
                if not tie_shared and reads.get(init.name, 0) > 1:
                    untied[init.name] = {"value": arr, "readers": 0,
                                         "where": _initializer_location(label, init.name)}
            else:
                env[init.name] = arr
                ctx.initializers[id(arr)] = (arr, init.name)
        shapes = dict(input_shapes or {})
        values = dict(input_values or {})
        symbolic_inputs: list = []
        for inp in model.graph.input:
            if inp.name in initialized:
                continue
            t = inp.type.tensor_type
            if not inp.type.HasField("tensor_type"):
                raise UnsupportedError(f"input {inp.name!r}: only tensor inputs are supported")
            dtype = dtype_of(t.elem_type, f"input {inp.name!r}")
            if t.elem_type in odt.NARROW:
                ctx.narrow[inp.name] = t.elem_type
                onnx_dtypes[inp.name] = odt.numpy_dtype(t.elem_type)
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
                for axis, d in enumerate(t.shape.dim):
                    if d.HasField("dim_value"):
                        shape.append(d.dim_value)
                    elif symbolic:
                        shape.append(_symbol_name(d.dim_param, inp.name, axis))
                        symbolic_inputs.append(inp.name)
                    else:
                        raise NeedsInputShapes(
                            f"input {inp.name!r} has a symbolic dimension "
                            f"{d.dim_param or '?'!r}; give its size with "
                            f"import_model(..., input_shapes={{{inp.name!r}: (...)}})",
                            [inp.name])
            with located(f"{label} input {inp.name!r}"):
                inputs[inp.name] = env[inp.name] = gc.placeholder(tuple(shape), dtype,
                                                                  name=inp.name)
        if values:
            raise GraphcError(f"input_values names {', '.join(map(repr, values))}, which are "
                              f"not inputs of the model ({', '.join(inputs) or 'none'})")
        if shapes:
            raise GraphcError(f"input_shapes names {', '.join(map(repr, shapes))}, which are "
                              f"not inputs of the model ({', '.join(inputs) or 'none'})")
        try:
            for node in model.graph.node:
                _untie(node, env, params, untied)
                _convert_node(ctx, node, env)
        except Undecidable as e:
            if not symbolic_inputs:
                raise
            names = list(dict.fromkeys(symbolic_inputs))
            raise NeedsInputShapes(f"{ctx.where()}: needs a concrete size of the symbolic "
                                   f"dims of input(s) {', '.join(map(repr, names))} ({e}); "
                                   f"give them with import_model(..., input_shapes=...)",
                                   names) from None
        outputs = {}
        for out in model.graph.output:
            if out.name not in env:
                raise GraphcError(f"graph output {out.name!r} is produced by no node")
            value = env[out.name]
            outputs[out.name] = ctx.tensor(value) if not isinstance(value, gc.Tensor) else value
            if out.name in ctx.narrow:
                onnx_dtypes[out.name] = odt.numpy_dtype(ctx.narrow[out.name])
    return ImportedModel(graph, inputs, outputs, params, opset, onnx_dtypes)


def _convert_node(ctx, node, env, depth: int = 0):
    """Convert one ONNX node into env (its outputs by name); ops graphc has no converter
    for, but that the ONNX schema defines as a function, are inlined."""
    if depth:       # an inlined function body's nodes: located at the node it came from
        _convert_located(ctx, node, env, depth)
        return
    with located(f"{ctx.label} node {_node_label(node)} ({node.op_type})"):
        _convert_located(ctx, node, env, depth)


def _convert_located(ctx, node, env, depth: int):
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
    ctx.operand_types = [ctx.narrow.get(name) for name in node.input]
    ctx.env = env
    convert = ops.CONVERTERS.get(node.op_type)
    if convert is not None and ctx.opset < IMPLEMENTED_FROM:
        _check_old_opset(ctx, node)
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
    narrow = narrow_float(args) if node.op_type in ops.WIDENED else None
    if narrow:
        args = [gc.cast(a, "float32") if isinstance(a, gc.Tensor) and a.dtype == narrow
                else a for a in args]
    outs = converted(ctx, convert, args, attrs)
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
        value = narrowed(ctx, node, name, value, attrs)
        env[name] = _fold(ctx, value, args)


def _untie(node, env, params, untied) -> None:
    """Point each shared initializer `node` reads at a variable of this node's own: the
    first reading node keeps `name`, later ones get `name.1`, `name.2`..."""
    for name in dict.fromkeys(node.input):
        if name not in untied:
            continue
        entry = untied[name]
        if entry["readers"]:
            fresh = f"{name}.{entry['readers']}"
            with located(entry["where"]):
                env[name] = params[fresh] = gc.variable(entry["value"].copy(), name=fresh)
        entry["readers"] += 1


def _check_old_opset(ctx, node):
    import onnx
    try:
        then = onnx.defs.get_schema(node.op_type, ctx.opset, "").since_version
        now = onnx.defs.get_schema(node.op_type, IMPLEMENTED_FROM, "").since_version
    except Exception:
        then, now = None, 0
    if then != now:
        raise ctx.unsupported(f"this op's opset-{ctx.opset} version differs from the "
                              f"opset-{IMPLEMENTED_FROM} one graphc implements")


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
                                            if a is not None) and \
            not is_symbolic(value.shape) and value.size <= 4096:
        return ctx.static(value, "a constant sub-expression")
    return value


def _node_label(node) -> str:
    """An ONNX node's name, or for an unnamed one the value it produces."""
    if node.name:
        return repr(node.name)
    first = next((o for o in node.output if o), "")
    return f"producing {first!r}" if first else "(unnamed)"


def _initializer_location(label: str, name: str) -> str:
    return f"{label} initializer {name!r}"


def _symbol_name(param: str, input_name: str, axis: int):
    """A graphc symbol for an ONNX dim_param (made an identifier), or None (a fresh
    symbol) for an unnamed dim."""
    if not param:
        return None
    name = "".join(c if c.isalnum() or c == "_" else "_" for c in param)
    return name if name.isidentifier() else f"d_{name}"


def compile(model_or_path, device: str = "cpu", input_shapes: dict | None = None,
            input_values: dict | None = None, **compile_options):  # noqa: A001
    """Import and compile: an Executable fed by the ONNX input names (keywords, or
    positionally in the model's input order) returning {ONNX output name: array}."""
    imported = import_model(model_or_path, input_shapes=input_shapes,
                            input_values=input_values)
    with imported.graph:
        exe = gc.compile(dict(imported.outputs), inputs=list(imported.inputs.values()),
                         device=device, **compile_options)
    if imported.onnx_dtypes:
        return NarrowIntegerExecutable(exe, list(imported.inputs), imported.onnx_dtypes)
    return exe


class NarrowIntegerExecutable:
    """An Executable whose ONNX inputs or outputs are 8/16/32-bit integers: feeds are
    converted to the int32/int64 graphc computes in, results back to their ONNX dtype.
    Everything else (save, dump, viz, profile, stats...) is the wrapped Executable's."""

    def __init__(self, exe, input_names, onnx_dtypes):
        self.executable, self.input_names, self.onnx_dtypes = exe, input_names, onnx_dtypes

    def __call__(self, *args, **feeds):
        feeds.update(zip(self.input_names, args))
        for name, dtype in self.onnx_dtypes.items():
            if name in feeds:
                v = np.asarray(feeds[name])
                if v.dtype != dtype:
                    raise gc.FeedError(f"input {name!r}: expected {dtype} (the model's ONNX "
                                       f"type), got {v.dtype}")
                feeds[name] = v.astype(np.int64 if dtype.itemsize == 4 else np.int32)
        out = self.executable(**feeds)
        return {k: v.astype(self.onnx_dtypes[k]) if k in self.onnx_dtypes else v
                for k, v in out.items()}

    def __getattr__(self, name):
        return getattr(self.executable, name)
