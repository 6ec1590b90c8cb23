"""Error types shared by the compiler and the runtime.

They live in the runtime so that an artifact can be loaded and run without importing the
compiler; `graphc` re-exports every one of them.
"""
from __future__ import annotations


class GraphcError(Exception):
    """Base class of every error graphc raises on purpose."""

    def __init__(self, message: str, loc: str | None = None):
        self.loc = loc
        self.bare_message = message
        super().__init__(f"{message} (at {loc})" if loc else message)


class ShapeError(GraphcError, ValueError):
    """An operation got operands whose shapes do not fit together."""


class DTypeError(GraphcError, TypeError):
    """An operation got an operand of a dtype it does not accept."""


class FeedError(GraphcError, ValueError):
    """A call was fed a missing, unknown or mis-shaped/mis-typed input."""


class ArtifactError(GraphcError):
    """An artifact file is corrupt, truncated, foreign or built for another target."""


class CompileError(GraphcError):
    """The compiler cannot build what was asked (unsupported op, dtype or option)."""


class DeviceError(GraphcError):
    """A device is missing, unknown, or its driver binding is unavailable."""


__all__ = ["GraphcError", "ShapeError", "DTypeError", "FeedError", "ArtifactError",
           "CompileError", "DeviceError"]
