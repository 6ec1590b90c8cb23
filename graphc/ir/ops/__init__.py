"""Importing this package registers every primitive."""
from . import collectives, elementwise, indexing, linalg, reduce, rng, shape, sources  # noqa: F401
