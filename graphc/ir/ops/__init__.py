"""Importing this package registers every primitive."""
from . import (collectives, control, elementwise, indexing, linalg, reduce, rng,  # noqa: F401
               shape, sources, winograd)
