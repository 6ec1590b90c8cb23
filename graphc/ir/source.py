"""Finds the user's own file and line for the node being built (for error messages), or
the provenance an importer declares for the nodes it builds (`located`): an ONNX model's
node name and op type instead of the importer's own lines."""
from __future__ import annotations

import contextlib
import contextvars
import os
import sys

_declared: contextvars.ContextVar = contextvars.ContextVar("graphc_location", default=None)


@contextlib.contextmanager
def located(where: str):
    """Nodes built inside the block get `where` as their location."""
    token = _declared.set(where)
    try:
        yield
    finally:
        _declared.reset(token)

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def is_declared(loc) -> bool:
    """Whether a node's location is an importer's provenance (an ONNX node), not the
    'file.py:LINE' of Python code."""
    return bool(loc) and not loc.rpartition(":")[2].isdigit()


def user_location() -> str | None:
    """'file.py:LINE' of the innermost stack frame outside the graphc package, or the
    provenance `located` declares."""
    declared = _declared.get()
    if declared is not None:
        return declared
    frame = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not os.path.abspath(filename).startswith(_PACKAGE_DIR + os.sep):
            return f"{filename}:{frame.f_lineno}"
        frame = frame.f_back
    return None
