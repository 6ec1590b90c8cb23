"""Memory planning: live ranges of temporary buffers and their offsets in one arena.

Offsets are assigned best-fit in decreasing size (as XLA's heap simulator does), 64-byte
aligned. A kernel may write an elementwise output into an input buffer that dies in that
kernel (in place): such pairs share one slot. Reports the arena size, the live-bytes lower
bound (the most bytes live at any step) and the naive one-buffer-per-value total.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from graphc_runtime.dims import Dim, Undecidable, hint

ALIGN = 64


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


@dataclass
class MemoryPlan:
    offsets: dict                    # buffer id -> arena offset
    arena_bytes: int
    live_bytes_lower_bound: int
    intervals: dict = field(default_factory=dict)   # buffer id -> (first step, last step, bytes)
    in_place: list = field(default_factory=list)     # (input buffer id, output buffer id)


def plan_memory(sizes: dict, first: dict, last: dict, in_place_pairs=()) -> MemoryPlan:
    """sizes/first/last: per temp buffer id, its bytes and the steps that write it first
    and read it last; in_place_pairs: (dying input, output) pairs allowed to share."""
    parent = {b: b for b in sizes}

    def find(b):
        while parent[b] != b:
            parent[b] = parent[parent[b]]
            b = parent[b]
        return b

    used_pairs = []
    owner = {b: b for b in sizes}      # per slot: the buffer that occupies it last
    for a, o in in_place_pairs:
        ra, ro = find(a), find(o)
        # o must be alone, and a must be the slot's latest occupant, dying where o starts
        if ra != ro and ro == o and owner[ra] == a and sizes[a] == sizes[o] \
                and last[a] == first[o]:
            parent[ro] = ra
            owner[ra] = o
            used_pairs.append((a, o))
    slots: dict = {}
    for b in sizes:
        r = find(b)
        lo, hi, size = slots.get(r, (first[b], last[b], sizes[b]))
        slots[r] = (min(lo, first[b]), max(hi, last[b]), max(size, sizes[b]))

    symbolic = {r: v for r, v in slots.items() if isinstance(v[2], Dim)}
    slots = {r: v for r, v in slots.items() if r not in symbolic}
    placed: list = []            # (offset, size, lo, hi)
    slot_offset = {}
    for r, (lo, hi, size) in sorted(slots.items(), key=lambda kv: (-kv[1][2], kv[1][0], kv[0])):
        size_a = _align(max(size, 1))
        busy = sorted((o, s) for o, s, l2, h2 in placed if not (h2 < lo or hi < l2))
        best, best_gap, cursor = None, None, 0
        for o, s in busy:
            gap = o - cursor
            if gap >= size_a and (best_gap is None or gap < best_gap):
                best, best_gap = cursor, gap
            cursor = max(cursor, o + s)
        offset = best if best is not None else cursor
        placed.append((offset, size_a, lo, hi))
        slot_offset[r] = offset
    arena = max((o + s for o, s, _, _ in placed), default=0)
    if symbolic:
        arena = _place_symbolic(symbolic, slot_offset, _align(arena))
    offsets = {b: slot_offset[find(b)] for b in sizes}
    steps = set(first.values()) | set(last.values())
    lower = max((sum(sizes[b] for b in sizes if first[b] <= t <= last[b]) for t in steps),
                default=0, key=hint)
    return MemoryPlan(offsets, arena, lower,
                      {b: (first[b], last[b], sizes[b]) for b in sizes}, used_pairs)


def _place_symbolic(slots: dict, slot_offset: dict, base: int):
    """Offsets for slots whose sizes are Dims, after `base` bytes of static ones: lanes of
    slots with disjoint lifetimes, each lane as large as its largest slot (a slot joins a
    lane only when one of the two sizes provably bounds the other for every size of the
    symbols). Lanes follow one another, so every offset is a polynomial in the symbols,
    evaluated by the code at the call. Returns the arena's size (a Dim)."""
    lanes: list = []             # [size, [(lo, hi), ...], [slot, ...]]
    for r, (lo, hi, size) in sorted(slots.items(), key=lambda kv: (-hint(kv[1][2]), kv[0])):
        size = align_up(size)
        for lane in lanes:
            if any(not (h2 < lo or hi < l2) for l2, h2 in lane[1]):
                continue
            larger = _larger(lane[0], size)
            if larger is None:
                continue
            lane[0] = larger
            lane[1].append((lo, hi))
            lane[2].append(r)
            break
        else:
            lanes.append([size, [(lo, hi)], [r]])
    offset = base
    for size, _, members in lanes:
        for r in members:
            slot_offset[r] = offset
        offset = offset + size
    return offset


def _larger(a, b):
    """The larger of two sizes when one bounds the other for every size of the symbols,
    else None."""
    try:
        return a if a >= b else b
    except Undecidable:
        return None


def align_up(size):
    """A multiple of ALIGN at least `size` for every value of its symbols: each
    coefficient (all non-negative for a size) rounded up to a multiple of ALIGN."""
    if not isinstance(size, Dim):
        return _align(size)
    return Dim.make({m: _align(c) for m, c in size.terms.items()})


def describe(plan: MemoryPlan, names: dict) -> str:
    """The `memory` dump: one line per temporary buffer."""
    lines = [f"arena {plan.arena_bytes} bytes, live lower bound {plan.live_bytes_lower_bound} bytes"]
    for b, (lo, hi, size) in sorted(plan.intervals.items(), key=lambda kv: hint(plan.offsets[kv[0]])):
        lines.append(f"  [{plan.offsets[b]:>10}, {plan.offsets[b] + size:>10})  steps {lo}..{hi}  "
                     f"{size} bytes  {names.get(b, '')}")
    for a, o in plan.in_place:
        lines.append(f"  in place: {names.get(o, o)} reuses {names.get(a, a)}")
    return "\n".join(lines)
