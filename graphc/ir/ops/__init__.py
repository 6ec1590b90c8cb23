"""Importing this package registers every primitive."""
from . import collectives, control, elementwise, indexing, linalg, reduce, rng, shape, sources  # noqa: F401
