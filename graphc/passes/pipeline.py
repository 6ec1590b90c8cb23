"""The graph pass pipeline: the passes every backend runs, with the backend's own
lowering passes (`Backend.lowering_passes`) in their place after CSE."""
from .autocast import autocast
from .cse import cse
from .constant_fold import constant_fold
from .dce import dce
from .hoist_invariants import hoist_invariants
from .merge_loops import merge_loops
from .pads_to_concat import pads_to_concat
from .prune_loops import prune_loops
from .simplify import simplify
from .split_reductions import split_reductions


def graph_pipeline(lowering=()) -> list:
    """The graph passes, in order: (name, function). `lowering`: the backend's passes,
    (name, function) pairs run after CSE (the CPU's conv_to_gemm, canonicalize_dots and
    column_sums)."""
    return [("simplify", simplify), ("pads_to_concat", pads_to_concat),
            ("constant_fold", constant_fold),
            ("merge_loops", merge_loops), ("prune_loops", prune_loops),
            ("hoist_invariants", hoist_invariants), ("cse", cse),
            ("autocast", autocast), *lowering,
            ("split_reductions", split_reductions), ("simplify_again", simplify),
            ("dce", dce)]
