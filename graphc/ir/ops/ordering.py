"""after(x, *deps): x's value, computed no earlier than `deps` (an optimization barrier).

Recomputation (graphc/checkpoint.py) reads the values it recomputes from through `after`,
with the backward pass's cotangents as `deps`: the copies are new nodes (common
subexpression elimination cannot merge them back into the forward pass's) and the
schedule cannot run them before the backward pass reaches them. Kernels read x where
`after` is read (a view); `deps` are only ordering.
"""
from __future__ import annotations

import numpy as np

from graphc_runtime.errors import ShapeError

from ..primitive import define


def _after_rule(inputs, attrs):
    if not inputs:
        raise ShapeError("after needs the value it passes on as its first operand")
    return inputs[0].shape, inputs[0].dtype


define("after", "view", _after_rule,
       lambda args, attrs, node: np.array(args[0], copy=True))
