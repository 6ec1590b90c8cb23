"""Recurrent layers built on gc.scan: lstm and gru (PyTorch's gate order and equations).

Sequences are time-major, xs (T, B, I). The input projection of every step is one matrix
product before the loop; each step adds the recurrent product h @ w_hh.
"""
from __future__ import annotations

from graphc_runtime.errors import ShapeError

from .. import functions as F
from ..api import Tensor
from ..control import scan
from ..ir.source import user_location


def _check(xs, w_ih, w_hh, gates: int, what: str) -> tuple[int, int, int]:
    loc = user_location()
    if xs.ndim != 3:
        raise ShapeError(f"{what}: xs must be (T, B, I), got {xs.node.type_str()}", loc)
    T, B, I = xs.shape
    if w_hh.ndim != 2 or w_hh.shape[1] != gates * w_hh.shape[0]:
        raise ShapeError(f"{what}: w_hh must be (H, {gates}H), got {w_hh.node.type_str()}", loc)
    H = w_hh.shape[0]
    if w_ih.shape != (I, gates * H):
        raise ShapeError(f"{what}: w_ih must be ({I}, {gates * H}) for inputs of {I} features "
                         f"and H={H}, got {w_ih.node.type_str()}", loc)
    return T, B, H


def _state(value, B, H, dtype, what):
    if value is None:
        return F.zeros((B, H), dtype)
    if value.shape != (B, H):
        raise ShapeError(f"{what} must be ({B}, {H}), got {value.node.type_str()}",
                         user_location())
    return value


def lstm(xs: Tensor, w_ih: Tensor, w_hh: Tensor, b: Tensor | None = None,
         h0: Tensor | None = None, c0: Tensor | None = None, reverse: bool = False,
         checkpoint: bool = False):
    """LSTM over xs (T, B, I) with w_ih (I, 4H), w_hh (H, 4H), b (4H,); gates i, f, g, o.
    Returns (ys (T, B, H), (h, c) after the last step)."""
    T, B, H = _check(xs, w_ih, w_hh, 4, "lstm")
    proj = F.matmul(xs, w_ih)
    if b is not None:
        proj = proj + b

    def step(carry, p):
        h, c = carry
        z = p + F.matmul(h, w_hh)
        i, f = F.sigmoid(z[:, :H]), F.sigmoid(z[:, H:2 * H])
        g, o = F.tanh(z[:, 2 * H:3 * H]), F.sigmoid(z[:, 3 * H:])
        c = f * c + i * g
        h = o * F.tanh(c)
        return (h, c), h
    (h, c), ys = scan(step, (_state(h0, B, H, xs.dtype, "lstm h0"),
                             _state(c0, B, H, xs.dtype, "lstm c0")), proj, reverse=reverse,
                      checkpoint=checkpoint)
    return ys, (h, c)


def gru(xs: Tensor, w_ih: Tensor, w_hh: Tensor, b_ih: Tensor | None = None,
        b_hh: Tensor | None = None, h0: Tensor | None = None, reverse: bool = False,
        checkpoint: bool = False):
    """GRU over xs (T, B, I) with w_ih (I, 3H), w_hh (H, 3H), biases (3H,); gates r, z, n:
    n = tanh(x W_in + b_in + r * (h W_hn + b_hn)), h' = (1 - z) * n + z * h.
    Returns (ys (T, B, H), h after the last step)."""
    T, B, H = _check(xs, w_ih, w_hh, 3, "gru")
    proj = F.matmul(xs, w_ih)
    if b_ih is not None:
        proj = proj + b_ih

    def step(h, p):
        rec = F.matmul(h, w_hh)
        if b_hh is not None:
            rec = rec + b_hh
        r = F.sigmoid(p[:, :H] + rec[:, :H])
        z = F.sigmoid(p[:, H:2 * H] + rec[:, H:2 * H])
        n = F.tanh(p[:, 2 * H:] + r * rec[:, 2 * H:])
        h = (1.0 - z) * n + z * h
        return h, h
    h, ys = scan(step, _state(h0, B, H, xs.dtype, "gru h0"), proj, reverse=reverse,
                 checkpoint=checkpoint)
    return ys, h
