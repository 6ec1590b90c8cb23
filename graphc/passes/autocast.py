"""Mixed precision (the compile option precision="bf16" or "fp16"): products in bfloat16
(or float16), the rest in float32.

Every float32 product and convolution of the program (the forward's and, since the
gradient graph is part of the program, the backward's) reads its operands rounded to
bfloat16 and gives its result in bfloat16, widened back to float32 for what follows:
torch.autocast's arithmetic for matmul and convolution. Variables (the master weights),
optimizer state, reductions, softmax, norms and losses stay float32: they are not
products. On a CPU with AMX tiles the bfloat16 products run there (backends/cpu/amx.py);
elsewhere on the float32 kernels (passes/low_precision_products.py). float16's narrow
range needs loss scaling in training (gc.optim.dynamic_loss_scale). Loop and branch
bodies are cast alike (the driver hands them the program's options).
"""
from __future__ import annotations

from .program import Program, rebuild

PRODUCTS = ("dot_general", "conv")
PRECISIONS = {"float32": "float32", "fp32": "float32", "bfloat16": "bfloat16",
              "bf16": "bfloat16", "float16": "float16", "fp16": "float16"}


def autocast(program: Program) -> Program:
    low = program.annotations.get("precision", "float32")
    if low == "float32":
        return program

    def rewrite(builder, node, inputs):
        if node.op not in PRODUCTS or node.dtype != "float32":
            return None
        narrow = tuple(builder.add("convert", (x,), {"new_dtype": low}, like=node)
                       for x in inputs)
        out = builder.add(node.op, narrow, dict(node.attrs), like=node)
        return builder.add("convert", (out,), {"new_dtype": "float32"}, like=node)
    return rebuild(program, rewrite)
