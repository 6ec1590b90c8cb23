"""graphc as an onnx.backend: `prepare(model).run(inputs)`, `run_model`, `run_node`,
`supports_device` (CPU, CUDA), for onnx.backend.test.BackendTest and the node
conformance cases (onnx.backend.test.case.node.collect_testcases()).

A model whose input dims are symbolic compiles once with graphc's symbolic dimensions.
Where that cannot be (a shape computed from a size that must be known, ConstantOfShape
of Shape(x)), or where shapes depend on input values (Reshape's shape or Reduce*'s axes
fed as inputs), the model is compiled at its first run for the shapes and values seen,
and again only when they change (one executable per distinct key, kept).
"""
from __future__ import annotations

import numpy as np
from onnx.backend.base import Backend, BackendRep

from graphc_runtime.errors import FeedError

from .errors import NeedsInputShapes, NeedsInputValues
from .importer import compile as compile_model

MAX_SPECIALIZATIONS = 64


class GraphcRep(BackendRep):
    """A compiled model: run(inputs) -> outputs in the model's output order."""

    def __init__(self, model, device, options, input_names, output_names):
        self.model, self.device, self.options = model, device, options
        self.input_names, self.output_names = input_names, output_names
        self.shaped, self.valued = set(), set()   # inputs the compile is specialized on
        self.exes: dict = {}
        self.bfloat16 = {i.name for i in model.graph.input
                         if i.type.tensor_type.elem_type == 16}
        self.exe = self._compile_for(None)     # None: compiled at the first run

    def _compile_for(self, feeds):
        """Compile, specialized on the inputs the importer asks for; with feeds None (at
        prepare) a request only records which inputs, and None is returned."""
        while True:
            shapes = {n: feeds[n].shape for n in self.shaped - self.valued} if feeds else {}
            values = {n: feeds[n] for n in self.valued} if feeds else {}
            try:
                return compile_model(self.model, device=self.device,
                                     input_shapes=shapes or None,
                                     input_values=values or None, **self.options)
            except (NeedsInputShapes, NeedsInputValues) as e:
                known = self.shaped if isinstance(e, NeedsInputShapes) else self.valued
                if set(e.inputs) <= known or (feeds is not None
                                              and any(n not in feeds for n in e.inputs)):
                    raise
                known.update(e.inputs)
                if feeds is None:
                    return None

    def run(self, inputs, **kwargs):
        if isinstance(inputs, dict):
            feeds = {k: _array(v) for k, v in inputs.items()}
        else:
            inputs = [inputs] if not isinstance(inputs, (list, tuple)) else list(inputs)
            feeds = dict(zip(self.input_names, (_array(v) for v in inputs)))
        for n in self.bfloat16 & feeds.keys():    # onnx < 1.19 gives bfloat16 bits as uint16
            if feeds[n].dtype == np.uint16:
                import ml_dtypes
                feeds[n] = feeds[n].view(ml_dtypes.bfloat16)
        if self.exe is not None:
            exe = self.exe
        else:
            missing = [n for n in self.shaped | self.valued if n not in feeds]
            if missing:
                raise FeedError(f"missing input(s) {', '.join(map(repr, sorted(missing)))}")
            exe = self._specialized(feeds)
        out = exe(**{k: v for k, v in feeds.items() if k not in self.valued})
        return [out[n] for n in self.output_names]

    def _key(self, feeds):
        return (tuple((n, feeds[n].shape) for n in sorted(self.shaped)),
                tuple((n, feeds[n].dtype.str, feeds[n].tobytes()) for n in sorted(self.valued)))

    def _specialized(self, feeds):
        exe = self.exes.get(self._key(feeds))
        if exe is None:
            exe = self._compile_for(feeds)         # may add inputs to specialize on
            if len(self.exes) >= MAX_SPECIALIZATIONS:
                self.exes.pop(next(iter(self.exes)))
            self.exes[self._key(feeds)] = exe
        return exe


def _array(value):
    """A feed as a numpy array (TensorProto feeds, as some conformance cases give, too)."""
    if isinstance(value, np.ndarray):
        from .dtypes import plain
        return plain(value)
    if type(value).__name__ == "TensorProto":
        from .dtypes import to_array
        return to_array(value)
    return np.asarray(value)


class GraphcBackend(Backend):
    @classmethod
    def prepare(cls, model, device: str = "CPU", **kwargs):
        super().prepare(model, device, **kwargs)
        initialized = {i.name for i in model.graph.initializer}
        names = [i.name for i in model.graph.input if i.name not in initialized]
        return GraphcRep(model, _device(device), kwargs, names,
                         [o.name for o in model.graph.output])

    @classmethod
    def run_model(cls, model, inputs, device: str = "CPU", **kwargs):
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(cls, node, inputs, device: str = "CPU", outputs_info=None, **kwargs):
        from onnx import helper
        inputs = [_array(v) for v in inputs]
        graph_inputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(
            v.dtype), v.shape) for n, v in zip(node.input, inputs)]
        outs = [helper.make_tensor_value_info(n, 0, None) for n in node.output if n]
        model = helper.make_model(helper.make_graph([node], "node", graph_inputs, outs))
        # outputs of unknown type do not pass onnx.checker: compile without prepare's check
        return GraphcRep(model, _device(device), kwargs, list(node.input),
                         [o.name for o in outs]).run(inputs)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return str(device).upper().split(":")[0] in ("CPU", "CUDA")


def _device(device: str) -> str:
    kind, _, index = str(device).partition(":")
    return "cpu" if kind.upper() == "CPU" else f"cuda{':' + index if index else ''}"


prepare = GraphcBackend.prepare
run_model = GraphcBackend.run_model
run_node = GraphcBackend.run_node
supports_device = GraphcBackend.supports_device
