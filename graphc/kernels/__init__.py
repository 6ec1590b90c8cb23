"""The kernel IR: the backend-neutral layer between the graph passes and scheduling.

`kernel` defines the kernels (a loop nest per fusion group: loop, row-reduction, dot,
conv, scatter, collective, control) over `index` expressions; the builders make one from
a group of nodes; `refine` rewrites loop nests; `products` says where a product fuses
into a sum. Nothing here imports scheduling or a backend.
"""
