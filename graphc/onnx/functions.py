"""ONNX ops defined as functions (RMSNormalization, Attention, Swish, ...): where graphc
has no converter of its own, the node is replaced by the op's function body from the ONNX
schema, with its inputs, outputs and attributes bound, as onnxruntime inlines them."""
from __future__ import annotations

from .dtypes import onnx_type_of


def body(node, opset: int, operands):
    """(FunctionProto, its default-domain opset) for `node`, or None when the schema has
    no function (or `node` is unknown to this onnx)."""
    import onnx
    try:
        schema = onnx.defs.get_schema(node.op_type, opset, node.domain)
    except Exception:                 # SchemaError: no such op in this onnx
        return None
    fn = None
    if schema.has_context_dependent_function:
        types = [_type_proto(v).SerializeToString() for v in operands]
        try:
            raw = schema.get_context_dependent_function_with_opset_version(
                opset, node.SerializeToString(), types)
        except Exception:             # the schema's builder rejected these operands
            raw = None
        if raw:
            fn = onnx.FunctionProto()
            fn.ParseFromString(raw)
    if fn is None and schema.has_function:
        raw = schema.get_function_with_opset_version(opset)
        if raw:
            fn = onnx.FunctionProto()
            if isinstance(raw, bytes):
                fn.ParseFromString(raw)
            else:
                fn.CopyFrom(raw)
    if fn is None or not fn.node:
        return None
    version = next((o.version for o in fn.opset_import if o.domain in ("", "ai.onnx")), opset)
    return fn, version, schema


def _type_proto(value):
    from onnx import TypeProto, helper
    if value is None:
        return TypeProto()
    elem, shape = onnx_type_of(value)
    return helper.make_tensor_type_proto(elem, shape)


def _rename_graph(graph, bound) -> None:
    """Rename every value of a sub-graph (in place) as the function's own are renamed."""
    for vi in list(graph.input) + list(graph.output) + list(graph.value_info):
        vi.name = bound(vi.name)
    for init in graph.initializer:
        init.name = bound(init.name)
    for n in graph.node:
        ins, outs = [bound(i) for i in n.input], [bound(o) for o in n.output]
        del n.input[:], n.output[:]
        n.input.extend(ins)
        n.output.extend(outs)
        for a in n.attribute:
            if a.type == a.GRAPH:
                _rename_graph(a.g, bound)
            for g in a.graphs:
                _rename_graph(g, bound)


def inline(node, fn, schema, prefix: str):
    """The function's nodes with the caller's names and attributes bound."""
    from onnx import NodeProto
    rename = {}
    for k, name in enumerate(fn.input):
        rename[name] = node.input[k] if k < len(node.input) else ""
    for k, name in enumerate(fn.output):
        rename[name] = node.output[k] if k < len(node.output) else f"{prefix}/{name}"
    caller = {a.name: a for a in node.attribute}
    defaults = {a.name: a for a in fn.attribute_proto}
    for name, attr in schema.attributes.items():
        if attr.default_value.type and name not in defaults:
            defaults[name] = attr.default_value

    def bound(name):
        if name == "":
            return ""
        return rename.get(name, f"{prefix}/{name}")

    nodes = []
    for inner in fn.node:
        n = NodeProto()
        n.CopyFrom(inner)
        del n.input[:], n.output[:], n.attribute[:]
        n.input.extend(bound(i) for i in inner.input)
        n.output.extend(bound(o) for o in inner.output)
        for a in inner.attribute:
            if a.ref_attr_name:
                source = caller.get(a.ref_attr_name) or defaults.get(a.ref_attr_name)
                if source is None:
                    continue                    # unset and no default: the inner default
                b = n.attribute.add()
                b.CopyFrom(source)
                b.name = a.name
            else:
                b = n.attribute.add()
                b.CopyFrom(a)
                if b.type == b.GRAPH:               # an If/Loop/Scan body: same names
                    _rename_graph(b.g, bound)
                for g in b.graphs:
                    _rename_graph(g, bound)
        n.name = f"{prefix}/{inner.name or inner.op_type}"
        nodes.append(n)
    return nodes
