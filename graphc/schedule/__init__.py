"""Scheduling: from an optimized program to kernels in order over planned memory.

`fusion` groups the program's nodes into kernels (asking the kernel IR's builders whether
a group can be one), `lower` builds each group's kernel, orders them and decides every
value's buffer, `memory` places the temporaries in the arena, `chaining` says which loop
kernel may run inside the previous kernel's thread chunks, `bodies` lowers the regions of
loops and conditionals through the compiler the driver hands down. What a backend decides
here (threads, scratch, padded epilogues) comes in a `SchedulePolicy` (`policy.py`).
"""
