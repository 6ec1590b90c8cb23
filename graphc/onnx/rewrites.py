"""Rewrites of the ONNX graph before conversion, as onnxruntime does at load time.

fold_batch_norm: Conv -> BatchNormalization or Gemm -> BatchNormalization (inference,
constant statistics and weights, the producer's result read by the BatchNormalization
only) becomes one Conv or Gemm with scaled weights and a shifted bias, so the
normalization costs nothing at run time.
"""
from __future__ import annotations

import numpy as np

from .dtypes import to_array


def _foldable(node, inits, readers):
    """Whether a Conv or Gemm's weights (and bias) are initializers only it reads."""
    if node.op_type == "Conv":
        bias_ok = len(node.input) < 3 or not node.input[2] or node.input[2] in inits
    elif node.op_type == "Gemm":
        if len(node.input) > 2 and node.input[2]:
            if node.input[2] not in inits or to_array(inits[node.input[2]]).ndim > 1:
                return False                    # a per-row C cannot take the shift
        bias_ok = True
    else:
        return False
    w = node.input[1]
    return bias_ok and w in inits and readers.get(w) == 1 and \
        to_array(inits[w]).dtype.kind == "f"


def fold_batch_norm(model):
    """A copy of `model` with each foldable (Conv or Gemm) + BatchNormalization pair merged
    (the model itself is left as it is); returns (model, number of pairs folded)."""
    import onnx
    from onnx import numpy_helper
    graph = model.graph
    inits = {i.name: i for i in graph.initializer}
    readers: dict = {}
    for node in graph.node:
        for name in node.input:
            readers[name] = readers.get(name, 0) + 1
    outputs = {o.name for o in graph.output}
    producer = {o: n for n in graph.node for o in n.output}
    fold = []
    for bn in graph.node:
        if bn.op_type != "BatchNormalization" or bn.domain not in ("", "ai.onnx"):
            continue
        if len([o for o in bn.output if o]) != 1 or _attr(bn, "training_mode", 0):
            continue
        prod = producer.get(bn.input[0])
        if prod is None or readers.get(bn.input[0]) != 1 or bn.input[0] in outputs:
            continue
        if not all(n in inits for n in bn.input[1:5]) or not _foldable(prod, inits, readers):
            continue
        fold.append((prod, bn))
    if not fold:
        return model, 0
    new = onnx.ModelProto()
    new.CopyFrom(model)
    g = new.graph
    by_name = {n.output[0]: n for n in g.node if n.output}
    inits = {i.name: i for i in g.initializer}
    folded, unused = set(), set()
    for prod, bn in fold:
        gamma, beta, mean, var = (to_array(inits[n]).astype(np.float64) for n in bn.input[1:5])
        scale = gamma / np.sqrt(var + _attr(bn, "epsilon", 1e-5))
        w = to_array(inits[prod.input[1]])
        has_bias = len(prod.input) > 2 and prod.input[2]
        n_out = w.shape[0] if prod.op_type == "Conv" or _attr(prod, "transB", 0) else w.shape[1]
        b = to_array(inits[prod.input[2]]).astype(np.float64) if has_bias else np.zeros(n_out)
        if prod.op_type == "Gemm":
            b = np.broadcast_to(b * _attr(prod, "beta", 1.0), (n_out,))
        if prod.op_type == "Conv" or _attr(prod, "transB", 0):
            new_w = w.astype(np.float64) * scale.reshape((-1,) + (1,) * (w.ndim - 1))
        else:
            new_w = w.astype(np.float64) * scale.reshape(1, -1)
        new_b = (b - mean) * scale + beta
        wname, bname = f"{bn.output[0]}__folded_w", f"{bn.output[0]}__folded_b"
        g.initializer.append(numpy_helper.from_array(new_w.astype(w.dtype), wname))
        g.initializer.append(numpy_helper.from_array(new_b.astype(w.dtype), bname))
        c = by_name[prod.output[0]]
        unused.update(n for n in list(c.input[1:]) + list(bn.input[1:5])
                      if n and readers.get(n) == 1)
        first = c.input[0]
        del c.input[:]
        c.input.extend([first, wname, bname])
        if prod.op_type == "Gemm":
            kept_attrs = [a for a in c.attribute if a.name != "beta"]
            del c.attribute[:]
            c.attribute.extend(kept_attrs)          # beta folded into the new C
        c.output[0] = bn.output[0]
        folded.add(bn.output[0])
    kept = [n for n in g.node if not (n.op_type == "BatchNormalization" and
                                      n.output[0] in folded)]
    del g.node[:]
    g.node.extend(kept)
    left = [i for i in g.initializer if i.name not in unused]
    del g.initializer[:]
    g.initializer.extend(left)
    return new, len(fold)


def _attr(node, name, default):
    from onnx import helper
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default
