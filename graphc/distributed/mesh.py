"""The processes of a run as a data x tensor x pipeline grid.

Rank r sits at (d, t, s) with r = (d * tp + t) * pp + s: the stages of one pipeline are
neighbouring ranks (activations go to r + 1), its tensor-parallel peers are pp apart
and its data-parallel replicas pp * tp apart. Each axis's group (a tuple of world ranks)
is what collectives take as `group`.
"""
from __future__ import annotations

from graphc_runtime.errors import GraphcError

from . import rank as _rank, size as _size


class Mesh:
    def __init__(self, dp: int = 1, tp: int = 1, pp: int = 1):
        for name, v in (("dp", dp), ("tp", tp), ("pp", pp)):
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise GraphcError(f"Mesh: {name} must be a positive int, got {v!r}")
        world = _size()
        if world == 1 and dp * tp > 1:
            raise GraphcError(f"Mesh(dp={dp}, tp={tp}, pp={pp}) needs {dp * tp * pp} "
                              f"processes; one process can only run the stages itself")
        if world > 1 and dp * tp * pp != world:
            raise GraphcError(f"Mesh(dp={dp}, tp={tp}, pp={pp}) needs {dp * tp * pp} "
                              f"processes, this run has {world}")
        self.dp, self.tp, self.pp, self.world = dp, tp, pp, world
        r = _rank()
        self.rank = r
        self.stage = r % pp if world > 1 else None        # None: every stage here
        self.tp_index = (r // pp) % tp
        self.dp_index = r // (pp * tp)

    def rank_of(self, d: int, t: int, s: int) -> int:
        return (d * self.tp + t) * self.pp + s

    def _stage(self) -> int:
        return self.stage if self.stage is not None else 0

    @property
    def dp_group(self) -> tuple:
        return tuple(self.rank_of(d, self.tp_index, self._stage()) for d in range(self.dp))

    @property
    def tp_group(self) -> tuple:
        return tuple(self.rank_of(self.dp_index, t, self._stage()) for t in range(self.tp))

    @property
    def stage_group(self) -> tuple:
        """Every rank running this rank's stage (all replicas, all tensor shards)."""
        return tuple(self.rank_of(d, t, self._stage()) for d in range(self.dp)
                     for t in range(self.tp))

    def __repr__(self) -> str:
        return (f"Mesh(dp={self.dp}, tp={self.tp}, pp={self.pp}; rank {self.rank} at "
                f"d={self.dp_index} t={self.tp_index} s={self.stage})")
