"""The default pass pipeline (gc.compile's, and each loop body's and branch's)."""
from .canonicalize_dots import canonicalize_dots
from .column_sums import column_sums
from .constant_fold import constant_fold
from .conv_to_gemm import conv_to_gemm
from .cse import cse
from .dce import dce
from .hoist_invariants import hoist_invariants
from .merge_loops import merge_loops
from .pads_to_concat import pads_to_concat
from .prune_loops import prune_loops
from .simplify import simplify
from .split_reductions import split_reductions


def default_pipeline():
    """The graph passes, in order: name and function."""
    return [("simplify", simplify), ("pads_to_concat", pads_to_concat),
            ("constant_fold", constant_fold),
            ("merge_loops", merge_loops), ("prune_loops", prune_loops),
            ("hoist_invariants", hoist_invariants), ("cse", cse),
            ("conv_to_gemm", conv_to_gemm), ("canonicalize_dots", canonicalize_dots),
            ("column_sums", column_sums),
            ("split_reductions", split_reductions), ("simplify_again", simplify),
            ("dce", dce)]
