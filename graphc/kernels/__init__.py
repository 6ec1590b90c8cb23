"""The kernel IR: the backend-neutral layer between the pass pipeline and the backends.

`kernel` defines the kernels (a loop nest per fusion group: loop, row-reduction, dot,
conv, scatter, collective) over `index` expressions; `refine` rewrites loop nests;
`lower` turns a fused, memory-planned program into scheduled kernels. Fusion asks the
kernel builders whether a group can become one kernel; the backends (graphc.codegen)
translate kernels to LLVM IR or PTX. Nothing here imports a backend.
"""
