"""Optimizers as graph updates: each returns the `updates` dict for gc.compile / evaluate.

Optimizer state (velocities, moments, the step count) lives in new variables named after
the parameter, so it persists across steps and is saved with the executable.
"""
from __future__ import annotations

import numpy as np

from graphc_runtime.errors import GraphcError

from .. import functions as F
from ..api import Tensor, bind, variable
from ..autodiff import grad
from ..ir.source import user_location


def _params_and_grads(loss: Tensor, params, grads):
    params = list(params)
    for p in params:
        if not isinstance(p, Tensor) or p.node.op != "variable":
            raise GraphcError(f"optimizer parameters must be variables, got {p!r}",
                              user_location())
    grads = grad(loss, params) if grads is None else list(grads)
    if len(grads) != len(params):
        raise GraphcError(f"{len(params)} parameters but {len(grads)} gradients",
                          user_location())
    return params, grads


def _state(p: Tensor, suffix: str) -> Tensor:
    with p.graph:
        return variable(np.zeros(p.shape, np.dtype(p.node.graph.variables[p.name].dtype)),
                        name=p.graph.unique_name(f"{p.name}/{suffix}"))


def sgd(loss: Tensor, params, lr: float, grads=None) -> dict:
    """p <- p - lr * g."""
    params, grads = _params_and_grads(loss, params, grads)
    return {p: p - lr * g for p, g in zip(params, grads)}


def momentum(loss: Tensor, params, lr: float, beta: float = 0.9, grads=None) -> dict:
    """v <- beta * v + g;  p <- p - lr * v (heavy ball)."""
    params, grads = _params_and_grads(loss, params, grads)
    updates = {}
    for p, g in zip(params, grads):
        v = _state(p, "velocity")
        v_new = beta * v + g
        updates[v] = v_new
        updates[p] = p - lr * v_new
    return updates


def adam(loss: Tensor, params, lr: float = 1e-3, b1: float = 0.9, b2: float = 0.999,
         eps: float = 1e-8, grads=None) -> dict:
    """Adam with bias correction (Kingma & Ba): the step count is an int32 variable."""
    params, grads = _params_and_grads(loss, params, grads)
    if not params:
        return {}
    with params[0].graph:
        t = variable(np.zeros((), np.int32), name=params[0].graph.unique_name("adam/step"))
    t_new = t + 1
    updates = {t: t_new}
    for p, g in zip(params, grads):
        m, v = _state(p, "adam_m"), _state(p, "adam_v")
        m_new = b1 * m + (1.0 - b1) * g
        v_new = b2 * v + (1.0 - b2) * (g * g)
        tf = F.cast(t_new, p.dtype)
        c1 = 1.0 - bind("pow", F.full((), b1, p.dtype, graph=p.graph), tf)
        c2 = 1.0 - bind("pow", F.full((), b2, p.dtype, graph=p.graph), tf)
        step = (m_new / c1) / (F.sqrt(v_new / c2) + eps)
        updates[m], updates[v] = m_new, v_new
        updates[p] = p - lr * step
    return updates


from .loss_scale import dynamic_loss_scale  # noqa: E402  (it uses the rest of graphc)

__all__ = ["sgd", "momentum", "adam", "dynamic_loss_scale"]
