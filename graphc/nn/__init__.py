"""Neural-network layers and losses, all compositions of primitives."""
from ..functions import gelu, log_softmax, relu, sigmoid, softmax, tanh
from . import init
from .layers import avg_pool2d, conv2d, dropout, layer_norm, linear, max_pool2d
from .losses import mse, softmax_cross_entropy
from .recurrent import gru, lstm
from .parallel import column_parallel_linear, row_parallel_linear
