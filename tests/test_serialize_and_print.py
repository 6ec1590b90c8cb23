"""JSON round trip (exact) of a graph using every primitive, and the text printer."""
import json

import numpy as np
import pytest

import graphc as gc
from graphc.api import bind
from graphc.ir import REGISTRY, serialize
from graphc.ir.printer import format_graph


def every_primitive_graph():
    g = gc.Graph("everything")
    with g:
        x = gc.placeholder((2, 3), "float32", name="x")
        i = gc.placeholder((4,), "int32", name="i")
        b = gc.placeholder((2, 3), "bool", name="b")
        v = gc.variable(np.arange(6, dtype=np.float64).reshape(2, 3), name="v")
        outs = [bind(op, x) for op in ("neg", "exp", "log", "log1p", "expm1", "tanh",
                                       "logistic", "sqrt", "rsqrt", "abs", "sign", "sin",
                                       "cos", "floor", "ceil", "round", "erf")]
        outs += [bind(op, x, x) for op in ("add", "sub", "mul", "div", "pow", "max", "min",
                                           "rem")]
        outs += [bind(op, i, i) for op in ("and", "or", "xor")] + [bind("not", b)]
        outs += [bind("compare", x, x, direction="lt"), bind("select", b, x, x),
                 bind("convert", x, new_dtype="bfloat16"),
                 gc.iota((2, 3), 1), gc.constant(np.array([1.5, np.nan, -np.inf], np.float32)),
                 v, bind("broadcast_in_dim", x, shape=(4, 2, 3), broadcast_dimensions=(1, 2)),
                 bind("reshape", x, new_sizes=(3, 2)), bind("transpose", x, permutation=(1, 0)),
                 bind("slice", x, start_indices=(0, 1), limit_indices=(2, 3), strides=(1, 2)),
                 bind("pad", x, low=(1, 0), high=(0, 2), interior=(1, 1), value=float("-inf")),
                 bind("concatenate", x, x, dimension=0), bind("reverse", x, dimensions=(1,)),
                 bind("window_view", x, sizes=(2, 2), strides=(1, 1))]
        outs += [bind(op, x, axes=(1,)) for op in ("reduce_sum", "reduce_max", "reduce_min",
                                                   "reduce_prod")]
        outs += [bind(op, x, axis=0, index_dtype="int32") for op in ("argmax", "argmin")]
        outs += [bind("dot_general", x, x, lhs_contracting=(1,), rhs_contracting=(1,),
                      lhs_batch=(), rhs_batch=())]
        img = gc.reshape(x, (1, 1, 2, 3))
        outs += [bind("conv", img, img, window_strides=(1, 1), padding=((1, 1), (0, 0)),
                      lhs_dilation=(1, 1), rhs_dilation=(1, 1), feature_group_count=1)]
        tiles = gc.reshape(gc.concatenate([x, x], axis=1), (1, 1, 2, 6))
        tiles = gc.concatenate([tiles, tiles], axis=2)              # (1, 1, 4, 6)
        u = gc.broadcast_to(gc.reshape(x[0, 0], (1, 1, 1)), (16, 1, 1))
        outs += [bind("winograd_conv2d", tiles, u)]                 # (1, 1, 2, 4)
        outs += [bind("gather", x, i, axis=1),
                 bind("scatter_add", x, i, bind("gather", x, i, axis=1), axis=1),
                 bind("rng", gc.random.key(1), shape=(3,), dtype="float32",
                      distribution="normal"),
                 bind("all_reduce", x, op="sum", axis_size=1),
                 bind("all_gather", x, axis=0, axis_size=1),
                 bind("reduce_scatter", x, axis=0, axis_size=1),
                 bind("after", x, i), bind("stop_gradient", x)]
        sent = bind("send", x, peer=0, tag=6)          # to this process itself
        outs += [sent, bind("recv", sent, shape=(2, 3), dtype="float32", peer=0, tag=6)]
        # control flow: scan, while and cond nodes (their results are `get` nodes)
        c, ys = gc.scan(lambda c, r: (c * r, c.sum()), x[0], x)
        outs += [c, ys, gc.while_loop(lambda s: s < 3, lambda s: s + 1, 0),
                 gc.cond(x.sum() > 0, lambda a: a * 2.0, lambda a: -a, x)]
        # symbolic sizes: a "batch" placeholder and the size's value at the call
        s = gc.placeholder(("batch", 3), "float32", name="s")
        outs += [gc.dim_size(s.shape[0] * 2 - 1, "float32"), (s[1:] * 2.0).mean(axis=0)]
    return g, outs


def test_round_trip_of_every_primitive_is_exact():
    g, outs = every_primitive_graph()
    assert {n.op for n in g.nodes} == set(REGISTRY)
    text = serialize.dumps(g, [o.node for o in outs])
    g2, outs2 = serialize.loads(text)
    assert serialize.dumps(g2, outs2) == text
    assert format_graph(g2) == format_graph(g)
    for n1, n2 in zip(g.nodes, g2.nodes):
        assert (n1.op, n1.shape, n1.dtype, n1.name, n1.loc) == (n2.op, n2.shape, n2.dtype,
                                                                n2.name, n2.loc)
        assert [i.id for i in n1.inputs] == [i.id for i in n2.inputs]
    feeds = {"x": np.random.default_rng(0).uniform(0.5, 2, (2, 3)).astype(np.float32),
             "i": np.array([2, 0, 1, 1], np.int32), "b": np.array([[1, 0, 1], [0, 0, 1]], bool),
             "s": np.arange(15, dtype=np.float32).reshape(5, 3)}
    from graphc.ir.interpreter import run
    for a, b in zip(run(g, [o.node for o in outs], feeds), run(g2, outs2, feeds)):
        np.testing.assert_array_equal(a, b)


def test_loader_rejects_malformed_and_tampered_json():
    g, outs = every_primitive_graph()
    data = json.loads(serialize.dumps(g))
    with pytest.raises(gc.ArtifactError, match="does not parse"):
        serialize.loads("{not json")
    with pytest.raises(gc.ArtifactError, match="not a graphc graph"):
        serialize.loads(json.dumps({"format": "other"}))
    bad = json.loads(json.dumps(data))
    bad["version"] = 99
    with pytest.raises(gc.ArtifactError, match="version 99"):
        serialize.graph_from_dict(bad)
    bad = json.loads(json.dumps(data))
    bad["nodes"][4]["shape"] = [7, 7]
    with pytest.raises(gc.ArtifactError, match="records type"):
        serialize.graph_from_dict(bad)
    bad = json.loads(json.dumps(data))
    bad["nodes"][5]["op"] = "frobnicate"
    with pytest.raises(gc.ArtifactError, match="frobnicate"):
        serialize.graph_from_dict(bad)


def test_printer_is_hlo_like(graph):
    x = gc.placeholder((256, 784), name="x")
    w = gc.variable(np.zeros((784, 10), np.float32), name="w")
    gc.relu(x @ w)
    text = format_graph(graph, with_location=True)
    lines = text.splitlines()
    assert lines[0] == "graph test {" and lines[-1] == "}"
    assert "%0 = parameter() {name=x} : f32[256,784]" in text
    assert "%1 = variable() {name=w} : f32[784,10]" in text
    assert "%2 = dot_general(%0, %1) {lhs_contracting=(1,), rhs_contracting=(0,), " \
           "lhs_batch=(), rhs_batch=()} : f32[256,10]" in text
    assert "max(%2, %4) : f32[256,10]" in text
    assert "test_serialize_and_print.py:" in text
    assert str(graph) == format_graph(graph)


def test_tensor_store_reads_unchanging_arrays_in_place():
    """A read-only array (a constant's) goes to the tensor store as a view of its own
    bytes, not a copy; a writable one (a variable's) and a bfloat16 one as bytes; the
    digests are those of the little-endian bytes either way."""
    import hashlib
    import ml_dtypes
    fixed = np.arange(1000, dtype=np.float32)
    fixed.flags.writeable = False
    cases = [(fixed, True), (np.arange(1000, dtype=np.float32), False),
             (np.zeros(500, ml_dtypes.bfloat16), False)]
    cases[2][0].flags.writeable = False
    for a, in_place in cases:
        tensors = {}
        ref = serialize.encode_array(a, tensors)
        raw = tensors[ref["__tensor__"]]
        assert ref["__tensor__"] == hashlib.sha256(a.tobytes()).hexdigest()
        assert np.shares_memory(np.frombuffer(raw, np.uint8), a.view(np.uint8)) == in_place
        back = serialize.decode_array(ref, tensors)
        np.testing.assert_array_equal(back.view(np.uint8), a.view(np.uint8))
