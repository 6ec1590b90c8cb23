"""The numpy-like function library; every function decomposes into primitives."""
from .creation import arange, dim_size, full, iota, ones, ones_like, zeros, zeros_like
from .elementwise import (abs, add, bitwise_and, bitwise_or, bitwise_xor, cast, ceil, clip,
                          cos, divide, equal, erf, exp, expm1, floor, floor_divide, gelu,
                          greater, greater_equal, isfinite, isnan, less, less_equal, log,
                          log1p, logical_and, logical_not, logical_or, logical_xor, maximum,
                          minimum, mod, multiply, negative, not_equal, power,
                          relu, remainder, round, rsqrt, sigmoid, sign, sin, sqrt, square,
                          stop_gradient, subtract, tanh, where)
from .indexing import getitem, one_hot, take, take_along_axis
from .linalg import dot, matmul, tensordot
from .int8 import matmul_8bit, pack_bytes
from .reductions import (argmax, argmin, log_softmax, logsumexp, max, mean, min, prod,
                         softmax, sum, var)
from .shapes import (broadcast_to, concatenate, expand_dims, flip, pad, reshape, squeeze,
                     stack, swapaxes, transpose)
