"""Dynamic loss scaling (torch.amp.GradScaler's rule) as graph updates, for float16
products (`gc.compile(..., precision="fp16")`), whose small gradients would flush to zero.

The loss is multiplied by a scale S before differentiation and the gradients divided by
it; a step whose gradients hold an inf or a NaN (the scaled products overflowed) updates
nothing (parameters, optimizer state and its step count keep their values) and halves
S; after `growth_interval` good steps in a row S doubles. S and the count of good steps
are variables (`<prefix>/scale`, `<prefix>/good_steps`): saved with the executable, read
with `exe.variables`.
"""
from __future__ import annotations

import numpy as np

from graphc_runtime.errors import GraphcError

from .. import functions as F
from ..api import Tensor, variable
from ..autodiff import grad
from ..ir.source import user_location


def dynamic_loss_scale(optimizer, loss: Tensor, params, *, init_scale: float = 2.0 ** 16,
                       growth_factor: float = 2.0, backoff_factor: float = 0.5,
                       growth_interval: int = 2000, prefix: str = "loss_scale",
                       **options) -> dict:
    """The updates of `optimizer(loss, params, grads=..., **options)` (sgd, momentum,
    adam) with the gradients of loss * S divided by S, applied only when all are
    finite; S's own updates added."""
    loc = user_location()
    if not (init_scale > 0 and growth_factor >= 1 and 0 < backoff_factor < 1):
        raise GraphcError(f"loss scaling needs init_scale > 0, growth_factor >= 1 and "
                          f"0 < backoff_factor < 1, got {init_scale}, {growth_factor}, "
                          f"{backoff_factor}", loc)
    if not isinstance(growth_interval, int) or growth_interval < 1:
        raise GraphcError(f"growth_interval must be a positive int, got {growth_interval!r}",
                          loc)
    params = list(params)
    if not params:
        return {}
    graph = params[0].graph
    with graph:
        scale = variable(np.float32(init_scale), name=graph.unique_name(f"{prefix}/scale"))
        good = variable(np.int32(0), name=graph.unique_name(f"{prefix}/good_steps"))
    scaled = grad(F.cast(loss, "float32") * scale, params)
    grads = [g / F.cast(scale, g.dtype) for g in scaled]
    # finite: a sum of g * 0 is 0 when every g is finite, NaN when one is inf or NaN
    probe = F.sum(F.stack([F.sum(F.cast(g, "float32") * 0.0) for g in grads]))
    finite = probe == 0.0
    updates = {v: F.where(finite, new, v)
               for v, new in optimizer(loss, params, grads=grads, **options).items()}
    grown = good + 1 >= growth_interval
    updates[scale] = F.where(finite, F.where(grown, scale * growth_factor, scale),
                             scale * backoff_factor)
    updates[good] = F.where(finite, F.where(grown, 0, good + 1), 0)
    return updates
