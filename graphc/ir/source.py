"""Finds the user's own file and line for the node being built (for error messages)."""
from __future__ import annotations

import os
import sys

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def user_location() -> str | None:
    """'file.py:LINE' of the innermost stack frame outside the graphc package."""
    frame = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not os.path.abspath(filename).startswith(_PACKAGE_DIR + os.sep):
            return f"{filename}:{frame.f_lineno}"
        frame = frame.f_back
    return None
