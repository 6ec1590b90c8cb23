"""The LLVM module every LLVM backend builds: intrinsics declared as LLVM mangles them,
C math functions, loop metadata. A backend's module builder subclasses it (the CPU's adds
the thread team, BLAS and the entry points; CUDA's shared memory, barriers and
libdevice, through the `libm` hook)."""
from __future__ import annotations

import re

import llvmlite.ir as ir

from graphc_runtime.dims import Undecidable

from ...ir.dtypes import itemsize
from ...ir.primitive import lookup
from .types import F32, _mangle


class LlvmModule:
    """One LLVM module and the declarations its kernels share."""

    def __init__(self, name: str, triple: str = "", data_layout: str = ""):
        self.module = ir.Module(name=name)
        if triple:
            self.module.triple = triple
        if data_layout:
            self.module.data_layout = data_layout
        self.scalef = False           # graphc_scalef is defined (AVX-512's vscalefps)
        self.has_fma = True           # fused multiply-add in hardware (else mul, then add)
        self.symbols: list = []       # symbol names: every kernel takes their values
        self.loop_properties: dict = {}   # a loop ID's reference (!N) -> its property

    # -- helpers --------------------------------------------------------------------------
    def loop_metadata(self, name: str, value) -> ir.MDValue:
        """A new loop ID (LLVM's self-referencing !llvm.loop node) with one property."""
        prop = self.module.add_metadata([ir.MetaDataString(self.module, name), value])
        self._loops = getattr(self, "_loops", 0) + 1
        md = self.module.add_metadata([ir.MetaDataString(self.module,
                                                         f"graphc.loop.{self._loops}"), prop])
        md.operands = (md,) + tuple(md.operands[1:])
        self.loop_properties[md.get_reference()] = f"{name}={value}"
        return md

    def shape_of(self, fn: ir.Function) -> str:
        """fn's IR text without its name and with each loop's metadata as its property:
        two functions with the same shape compute the same thing."""
        text = str(fn).replace(f'@"{fn.name}"', "@F").replace(f"@{fn.name}(", "@F(")
        return re.sub(r"!\d+", lambda m: self.loop_properties.get(m.group(0), m.group(0)),
                      text)

    def intrinsic(self, name, types):
        """Declare an LLVM intrinsic overloaded on `types` (mangled as LLVM expects)."""
        mangled = name + "".join("." + _mangle(t) for t in types)
        if mangled in self.module.globals:
            return self.module.globals[mangled]
        ty = types[0]
        if name == "llvm.fptosi.sat":
            fnty = ir.FunctionType(types[0], [types[1]])
        elif name in ("llvm.maximum", "llvm.minimum", "llvm.maxnum", "llvm.minnum"):
            fnty = ir.FunctionType(ty, [ty, ty])
        elif name in ("llvm.fmuladd", "llvm.fma"):
            fnty = ir.FunctionType(ty, [ty, ty, ty])
        else:
            fnty = ir.FunctionType(ty, [ty])
        return ir.Function(self.module, fnty, mangled)

    def libm(self, op: str, ty):
        sym = lookup(op).libm[0 if ty == F32 else 1]
        if sym in self.module.globals:
            return self.module.globals[sym]
        nargs = 2 if op == "pow" else 1
        fn = ir.Function(self.module, ir.FunctionType(ty, [ty] * nargs), sym)
        return fn


def _temps(kern, offsets) -> list:
    """The kernel's temp buffers placed in the arena, by id."""
    bufs = {}
    for ld in kern.reads():
        bufs[ld.buffer.id] = ld.buffer
    for st in kern.writes():
        bufs[st.buffer.id] = st.buffer
    return sorted((b for b in bufs.values() if b.kind == "temp" and b.id in offsets),
                  key=lambda b: b.id)


def twin_buffers(kern, offsets) -> dict:
    """Temp buffers of this kernel at exactly the arena range of another of its buffers,
    of the same element size (a result computed in place of an operand, maybe of another
    dtype: int32 from float32): each id -> the first twin's id. A backend may read and
    write both through one pointer: one array to LLVM, whose loops then vectorize, not
    two arrays that may overlap."""
    same: dict = {}             # (offset, bytes, element size) -> the ids there, first first
    for b in _temps(kern, offsets):
        if isinstance(offsets[b.id], int) and isinstance(b.nbytes, int):
            same.setdefault((offsets[b.id], b.nbytes, itemsize(b.dtype)), []).append(b.id)
    return {i: ids[0] for ids in same.values() if len(ids) > 1 for i in ids}


def aliased_buffers(kern, offsets, twins: dict | None = None) -> set:
    """Temp buffers of this kernel whose arena ranges overlap another one of its buffers
    (those kept in a kernel's scratch have none); where `twins` (twin_buffers) is given,
    twins read through one pointer do not count as overlapping each other."""
    temps = _temps(kern, offsets)
    twins = twins or {}
    out = set()
    for i, a in enumerate(temps):
        for c in temps[i + 1:]:
            if a.id in twins and twins.get(a.id) == twins.get(c.id):
                continue
            a0, c0 = offsets[a.id], offsets[c.id]
            try:
                overlap = a0 < c0 + c.nbytes and c0 < a0 + a.nbytes
            except Undecidable:          # symbolic ranges that may overlap: say they do
                overlap = True
            if overlap:
                out.update((a.id, c.id))
    return out
