"""The graph IR: Graph, Node, dtypes, the primitive registry, printer, JSON, interpreter."""
from . import ops  # noqa: F401  (registers the primitives)
from .graph import Graph, Node, current_graph, reset_default_graph
from .primitive import REGISTRY, Primitive, bind, lookup

__all__ = ["Graph", "Node", "current_graph", "reset_default_graph", "REGISTRY", "Primitive",
           "bind", "lookup"]
