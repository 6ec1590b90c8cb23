"""Graph <-> JSON, exact round trip: attributes, constants (raw bytes), variables, names."""
from __future__ import annotations

import base64
import hashlib
import json

import numpy as np

from graphc_runtime.dims import Dim

from graphc_runtime.errors import ArtifactError

from . import dtypes
from .graph import Graph
from .primitive import freeze, lookup
from .region import Region

FORMAT = "graphc-graph"
VERSION = 1


EXTERNAL_MIN_BYTES = 256     # arrays this large go to the tensor store when one is given


def encode_array(a: np.ndarray, tensors: dict | None = None) -> dict:
    """An array as JSON: its bytes inline (base64), or, with a `tensors` store {SHA-256
    hex of the little-endian bytes: bytes} and at least EXTERNAL_MIN_BYTES, a reference
    to them there (artifacts keep each tensor's bytes once, in a section of their own)."""
    a = np.asarray(a, order="C")               # one copy at most, for the bytes
    little = a.astype(a.dtype.newbyteorder("<"), copy=False)
    raw = _unchanging_bytes(little) if tensors is not None and little is a else None
    if raw is None:
        raw = little.tobytes()
    head = {"dtype": dtypes.canonical(a.dtype), "shape": list(a.shape)}
    if tensors is not None and len(raw) >= EXTERNAL_MIN_BYTES:
        digest = hashlib.sha256(raw).hexdigest()
        tensors[digest] = raw
        return {"__tensor__": digest, **head}
    return {"__ndarray__": base64.b64encode(raw).decode(), **head}


def _unchanging_bytes(a: np.ndarray):
    """The bytes of an array that cannot change (a constant's, read-only) and is large
    enough for the tensor store, read in place (a ConvNeXt-sized model's 28 MB of
    constants are not copied to hash them); None otherwise, or where numpy cannot give
    its buffer (bfloat16's)."""
    if a.flags.writeable or not a.flags.c_contiguous or a.nbytes < EXTERNAL_MIN_BYTES:
        return None
    try:
        return memoryview(a).cast("B")
    except (TypeError, ValueError, BufferError):
        return None


def decode_array(obj: dict, tensors=None) -> np.ndarray:
    """The array of `encode_array`'s form; a reference is looked up in `tensors` (a
    mapping or a function from SHA-256 hex to bytes)."""
    dtype = dtypes.to_numpy(obj["dtype"]).newbyteorder("<")
    if "__tensor__" in obj:
        raw = _tensor_bytes(obj["__tensor__"], tensors)
    else:
        raw = base64.b64decode(obj["__ndarray__"])
    a = np.frombuffer(raw, dtype=dtype).reshape(obj["shape"])
    return a.astype(dtypes.to_numpy(obj["dtype"]))


def _tensor_bytes(digest, tensors) -> bytes:
    found = None
    if callable(tensors):
        found = tensors(digest)
    elif tensors is not None:
        found = tensors.get(digest)
    if found is None:
        raise ArtifactError(f"the graph refers to tensor {str(digest)[:16]}..., which is not "
                            f"among the tensors given")
    if hashlib.sha256(found).hexdigest() != digest:
        raise ArtifactError(f"tensor {digest[:16]}...: its bytes do not match its digest")
    return found


_PLAIN = frozenset((int, str, bool, type(None)))      # JSON as they are


def _encode(value, tensors=None):
    if type(value) in _PLAIN:
        return value
    if isinstance(value, tuple) and _PLAIN.issuperset(map(type, value)):
        return {"__tuple__": list(value)}
    if isinstance(value, Region):
        return {"__region__": graph_to_dict(value.graph, value.outputs, False, tensors),
                "params": [p.id for p in value.params]}
    if isinstance(value, np.ndarray):
        return encode_array(value, tensors)
    if isinstance(value, tuple):
        return {"__tuple__": [_encode(v, tensors) for v in value]}
    if isinstance(value, float):
        return {"__float__": value.hex()}      # exact, and NaN/inf safe
    if isinstance(value, Dim):
        return {"__dim__": value.to_json()}
    return value


def _decode(value, tensors=None):
    if isinstance(value, dict):
        if "__ndarray__" in value or "__tensor__" in value:
            return decode_array(value, tensors)
        if "__region__" in value:
            graph, outputs = graph_from_dict(value["__region__"], tensors)
            params = [graph.nodes[i] for i in value["params"]]
            if any(p.op != "parameter" for p in params) or outputs is None:
                raise ArtifactError("a region's parameters must be parameter nodes and it "
                                    "must list its outputs")
            return Region(graph, params, outputs)
        if "__tuple__" in value:
            return tuple(_decode(v, tensors) for v in value["__tuple__"])
        if "__float__" in value:
            return float.fromhex(value["__float__"])
        if "__dim__" in value:
            return Dim.from_json(value["__dim__"])
    if isinstance(value, list):
        return tuple(_decode(v, tensors) for v in value)
    return value


def graph_to_dict(graph: Graph, outputs=None, include_variables: bool = True,
                  tensors: dict | None = None) -> dict:
    """The graph as JSON-able data; with a `tensors` store, large arrays are references
    into it (encode_array)."""
    return {
        "format": FORMAT, "version": VERSION, "name": graph.name,
        "nodes": [{"id": n.id, "op": n.op, "inputs": [i.id for i in n.inputs],
                   "attrs": {k: _encode(v, tensors) for k, v in n.attrs.items()},
                   "shape": [_encode(d) for d in n.shape], "dtype": n.dtype, "name": n.name, "loc": n.loc}
                  for n in graph.nodes],
        "variables": {k: encode_array(v, tensors) for k, v in graph.variables.items()}
        if include_variables else {},
        "outputs": [o.id for o in outputs] if outputs is not None else None,
    }


def graph_from_dict(data: dict, tensors=None):
    """(graph, outputs or None) from `graph_to_dict`'s form; ArtifactError if malformed;
    tensor references are looked up in `tensors`."""
    try:
        if data.get("format") != FORMAT:
            raise ArtifactError(f"not a graphc graph (format {data.get('format')!r})")
        if data.get("version") != VERSION:
            raise ArtifactError(f"graph format version {data.get('version')!r} is not "
                                f"supported (this graphc reads version {VERSION})")
        graph = Graph(data["name"])
        by_id = {}
        for rec in data["nodes"]:
            lookup(rec["op"])
            inputs = [by_id[i] for i in rec["inputs"]]
            attrs = {k: freeze(_decode(v, tensors)) for k, v in rec["attrs"].items()}
            shape, dtype = lookup(rec["op"]).rule(inputs, attrs)
            if tuple(shape) != tuple(_decode(d) for d in rec["shape"]) or \
                    dtype != rec["dtype"]:
                raise ArtifactError(f"node {rec['id']} ({rec['op']}) records type "
                                    f"{rec['dtype']}{rec['shape']}, its operands give "
                                    f"{dtype}{list(shape)}")
            node = graph.add_node(rec["op"], inputs, attrs, tuple(shape), dtype,
                                  rec["name"], rec["loc"])
            if node.id != rec["id"]:
                raise ArtifactError(f"node ids must be consecutive from 0, got {rec['id']}")
            by_id[rec["id"]] = node
            if node.name:
                graph._node_names.add(node.name)
        graph.variables = {k: decode_array(v, tensors) for k, v in data["variables"].items()}
        for n in graph.nodes:
            if n.op == "variable" and n.attrs["name"] not in graph.variables and \
                    data["variables"]:
                raise ArtifactError(f"variable {n.attrs['name']!r} has no value")
        outputs = None if data.get("outputs") is None else [by_id[i] for i in data["outputs"]]
        return graph, outputs
    except ArtifactError:
        raise
    except Exception as e:   # malformed structure of any kind
        raise ArtifactError(f"malformed graph JSON: {type(e).__name__}: {e}") from None


def dumps(graph: Graph, outputs=None, include_variables: bool = True,
          tensors: dict | None = None) -> str:
    return json.dumps(graph_to_dict(graph, outputs, include_variables, tensors))


def loads(text: str, tensors=None):
    try:
        data = json.loads(text)
    except (ValueError, TypeError) as e:
        raise ArtifactError(f"graph JSON does not parse: {e}") from None
    if not isinstance(data, dict):
        raise ArtifactError("graph JSON must be an object")
    return graph_from_dict(data, tensors)
