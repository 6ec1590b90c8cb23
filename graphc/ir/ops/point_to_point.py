"""send(x, peer, tag) and recv(token, shape, dtype, peer, tag): one array between two
processes, point to point (pipeline stages hand activations and cotangents on).

send's result is a token, a scalar 0 of x's dtype: a program must return it (or order a
later op by it) for the send to run. recv's operand is such a token (or any float
scalar): it orders the receive after whatever produced it; its value is not read.
Differentiation runs the messages backwards: the cotangent of a sent value is received
from the peer, the cotangent of a received value sent back to it, both with tag + 1.
Sending to this process itself goes through an in-process queue (graphc_runtime/
point_to_point.py), so graphs with sends and receives run, and differentiate, in one
process too.
"""
from __future__ import annotations

import numpy as np

from graphc_runtime.errors import DTypeError, ShapeError
from graphc_runtime.point_to_point import MAX_TAG

from ..primitive import define

DTYPES = ("float32", "float64", "int32", "int64")


def _peer_and_tag(attrs):
    peer, tag = attrs["peer"], attrs["tag"]
    if not isinstance(peer, int) or isinstance(peer, bool) or peer < 0:
        raise ShapeError(f"peer must be a process rank (an int >= 0), got {peer!r}")
    if not isinstance(tag, int) or isinstance(tag, bool) or not 0 <= tag < MAX_TAG:
        raise ShapeError(f"tag must be an int in [0, {MAX_TAG}) (its cotangent travels "
                         f"with tag + 1), got {tag!r}")


def _send_rule(inputs, attrs):
    (x,) = inputs
    _peer_and_tag(attrs)
    if x.dtype not in DTYPES:
        raise DTypeError(f"cannot send {x.dtype} (sends carry {', '.join(DTYPES)})")
    return (), x.dtype


def _recv_rule(inputs, attrs):
    (token,) = inputs
    _peer_and_tag(attrs)
    shape, dtype = attrs["shape"], attrs["dtype"]
    if not isinstance(shape, tuple) or not all(isinstance(d, int) and d >= 0 for d in shape):
        raise ShapeError(f"recv: shape must be a tuple of static sizes, got {shape!r}")
    if dtype not in DTYPES:
        raise DTypeError(f"cannot recv {dtype!r} (receives carry {', '.join(DTYPES)})")
    if token.shape != () or token.dtype not in DTYPES:
        raise ShapeError(f"recv: its operand is a token (a send's result or another numeric "
                         f"scalar), got {token.type_str()}")
    return shape, dtype


def _reference(args, attrs, node):
    from graphc_runtime import point_to_point
    from .. import dtypes
    dst = np.empty(node.shape, dtypes.to_numpy(node.dtype))
    point_to_point.run(node.op, attrs, np.ascontiguousarray(args[0]), dst)
    return dst


define("send", "collective", _send_rule, _reference, arity=1)
define("recv", "collective", _recv_rule, _reference, arity=1)
