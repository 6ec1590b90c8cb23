"""Graph passes, one a file: each takes a Program and returns a new one."""
from .constant_fold import constant_fold
from .conv_to_gemm import conv_to_gemm
from .cse import cse
from .dce import dce
from .simplify import simplify
from .split_reductions import split_reductions

__all__ = ["constant_fold", "conv_to_gemm", "cse", "dce", "simplify", "split_reductions"]
