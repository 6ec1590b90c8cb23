"""Losses: softmax cross-entropy with integer labels, mean squared error."""
from __future__ import annotations

from graphc_runtime.errors import DTypeError, ShapeError

from .. import functions as F
from ..api import Tensor
from ..ir import dtypes
from ..ir.source import user_location


def softmax_cross_entropy(logits: Tensor, labels) -> Tensor:
    """-log softmax(logits)[label], one loss per row (logits (..., C), labels (...) ints).

    Uses logsumexp, so large logits do not overflow. `.mean()` gives the batch loss.
    """
    labels = labels if isinstance(labels, Tensor) else F.cast(labels, "int32")
    if labels.dtype not in dtypes.INT_DTYPES:
        raise DTypeError(f"softmax_cross_entropy: labels must be integers, got "
                         f"{labels.node.type_str()}", user_location())
    if logits.shape[:-1] != labels.shape:
        raise ShapeError(f"softmax_cross_entropy: logits {logits.node.type_str()} need labels "
                         f"of shape {logits.shape[:-1]}, got {labels.node.type_str()}",
                         user_location())
    onehot = F.one_hot(labels, logits.shape[-1], logits.dtype)
    picked = F.sum(logits * onehot, -1)
    return F.logsumexp(logits, -1) - picked


def mse(pred: Tensor, target) -> Tensor:
    """Mean over all elements of (pred - target)**2 (a scalar)."""
    d = pred - target
    return F.mean(d * d)
