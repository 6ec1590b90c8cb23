"""The kernel IR's names in one namespace (`from graphc.kernels import kernel as K`).

The concerns live in their own modules: `ir` (buffers, value expressions, the kernel
classes with `reads()`, `writes()`, `flops()` and `kind`), `expressions` (a group's nodes
as value expressions, one rule per primitive), one builder module per kernel kind
(`build_loop`, `build_row`, `build_dot`, `build_conv`, `build_scatter`) behind the one
table of `builders`.
"""
from .build_conv import build_conv
from .build_dot import (build_dot, build_winograd, channel_vars, layout_epilogue,
                        padded_epilogue, reshaped_epilogue)
from .build_loop import build_loop, loop_vars
from .build_row import REDUCE_KIND, build_row, reduction_signature, value_exprs
from .build_scatter import build_scatter
from .expressions import ExprBuilder, register_expression
from .ir import (Acc, Buffer, Choose, CollectiveKernel, Const, ControlKernel, ConvKernel,
                 DotKernel, IndexValue, InRange, Illegal, Load, LoopKernel, Prim, Reduction,
                 RngValue, RowKernel, ScatterKernel, Store, VExpr, WinogradKernel, extent,
                 loads_of)


__all__ = ["Acc", "Buffer", "Choose", "CollectiveKernel", "Const", "ControlKernel",
           "ConvKernel", "DotKernel", "ExprBuilder", "IndexValue", "InRange", "Illegal",
           "Load", "LoopKernel", "Prim", "REDUCE_KIND", "Reduction", "RngValue",
           "RowKernel", "ScatterKernel", "Store", "VExpr", "WinogradKernel", "build_conv",
           "build_dot", "build_loop", "build_row", "build_scatter", "build_winograd",
           "channel_vars", "extent", "layout_epilogue", "loads_of", "loop_vars", "padded_epilogue",
           "reduction_signature", "reshaped_epilogue", "register_expression", "value_exprs"]
