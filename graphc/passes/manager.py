"""PassManager: runs named passes in order, times each, and can dump after any of them."""
from __future__ import annotations

import os
import time
from typing import Callable

from ..ir.printer import format_graph
from .program import Program


class PassManager:
    """`dumps` holds the program's text before the first pass ("input") and after the
    last (under its name); with `dump_dir`, every pass's is written there too. Printing a
    large graph after each pass cost more than the passes (a ConvNeXt-style model: ~0.5
    of 0.6 s), so without `dump_dir` only those two are printed, and none without
    `texts` (loop bodies)."""

    def __init__(self, passes: list[tuple[str, Callable[[Program], Program]]],
                 dump_dir: str | None = None, texts: bool = True):
        self.passes = passes
        self.dump_dir = dump_dir
        self.texts = texts
        self.seconds: dict[str, float] = {}
        self.dumps: dict[str, str] = {}

    def run(self, program: Program) -> Program:
        if self.dump_dir:
            os.makedirs(self.dump_dir, exist_ok=True)
        self._dump("00-input", program)
        for k, (name, fn) in enumerate(self.passes, start=1):
            start = time.perf_counter()
            program = fn(program)
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - start
            if self.dump_dir or k == len(self.passes):
                self._dump(f"{k:02d}-{name}", program)
        return program

    def _dump(self, label: str, program: Program) -> None:
        if not (self.texts or self.dump_dir):
            return
        text = program_text(program)
        self.dumps[label.split("-", 1)[1]] = text
        if self.dump_dir:
            with open(os.path.join(self.dump_dir, f"{label}.txt"), "w") as f:
                f.write(text + "\n")


def program_text(program: Program) -> str:
    text = format_graph(program.graph, program.live_nodes())
    lines = text.splitlines()
    tail = ["  outputs: " + ", ".join(f"%{o.id}" for o in program.outputs)]
    if program.updates:
        tail.append("  updates: " + ", ".join(f"{name} <- %{n.id}" for name, n in program.updates))
    return "\n".join(lines[:-1] + tail + lines[-1:])
