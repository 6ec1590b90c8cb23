"""Importing this package registers every primitive."""
from . import (collectives, control, elementwise, indexing, linalg, ordering,  # noqa: F401
               point_to_point, reduce, rng, shape, sources, stop_gradient, winograd)
