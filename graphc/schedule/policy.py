"""SchedulePolicy: what a backend decides in fusion and lowering."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class SchedulePolicy:
    """A backend's answers to scheduling's questions (the defaults are the plainest).

    threads: how many threads run each kernel.
    rearranged_epilogues: a product's epilogue may also write its result padded (the next
        convolution's input) or rearranged per image (layout nests): the backend's dot
        kernel fills borders and runs layout nests.
    threads_fit(kernel, threads): whether a merged kernel still splits well over the
        threads (None: always).
    scratch_of(kernel): ids of the kernel's temporaries the backend keeps in a scratch of
        the kernel's own; they get no room in the arena.
    chaining: a small loop kernel may run inside the previous kernel's thread chunks
        (schedule/chaining.py), so the leader's buffers stay live one step longer.
    fuse: whether to fuse at all (the `fuse` compile option).
    """
    threads: int = 1
    rearranged_epilogues: bool = False
    threads_fit: Callable | None = None
    scratch_of: Callable | None = None
    chaining: bool = False
    fuse: bool = True

    def fits(self, kernel) -> bool:
        return self.threads_fit is None or self.threads_fit(kernel, self.threads)
