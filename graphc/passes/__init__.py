"""Graph passes, one a file: each takes a Program and returns a new one."""
from .canonicalize_dots import canonicalize_dots
from .constant_fold import constant_fold
from .conv_to_gemm import conv_to_gemm
from .cse import cse
from .dce import dce
from .hoist_invariants import hoist_invariants
from .merge_loops import merge_loops
from .prune_loops import prune_loops
from .simplify import simplify
from .split_reductions import split_reductions

__all__ = ["canonicalize_dots", "constant_fold", "conv_to_gemm", "cse", "dce", "hoist_invariants", "merge_loops", "prune_loops", "simplify",
           "split_reductions"]
