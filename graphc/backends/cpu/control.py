"""Loops and conds inside the one native call (ModuleBuilder's part for ControlKernels).

Each region becomes a function `<kernel>_<role>(i8** table)` built like a program's
segment (its kernels, its own table: slot 0 its arena, then its inputs, outputs and
constants). The enclosing segment fills a table per region and calls it: scan once per
step (sequence slices and stacked outputs addressed by the step), while until the cond
region says stop, cond one of two. Loop-carried values live in two buffers that swap
roles each step; the start buffer is chosen so that the final value lands in the result.
"""
from __future__ import annotations

from dataclasses import dataclass

import llvmlite.ir as ir

from graphc_runtime.dims import Dim
from graphc_runtime.errors import CompileError

from ...kernels import kernel as K
from ..llvm.symbols import emit_dim
from ..llvm.types import I1, I8, I64, VOID


@dataclass
class ControlEntry:
    kernel: K.ControlKernel
    functions: dict           # role -> the region's function


class ControlBuilder:
    """ModuleBuilder's emission of ControlKernels (mixed into it)."""

    def add_control(self, kern: K.ControlKernel, emit_schedule) -> ControlEntry:
        """Compile each region of `kern` to a function; `emit_schedule(lowered)` emits a
        Lowered program's kernels and returns its schedule (segments)."""
        functions = {}
        saved, self.profiling = self.profiling, None       # regions are timed as a whole
        try:
            for role, low in kern.bodies.items():
                segments = emit_schedule(low)
                if len(segments) != 1:
                    raise CompileError(f"{kern.name}: collectives inside a loop or cond "
                                       f"body are not supported")
                functions[role] = self._segment(
                    f"{kern.name}_{role}", segments[0], lambda buf, low=low: low.slots[buf.id],
                    lambda buf, low=low: low.memory.offsets.get(buf.id),
                    dims_slot=1 + len(low.slots))
        finally:
            self.profiling = saved
        entry = ControlEntry(kern, functions)
        if self.profiling is not None:       # timed as one kernel of its program
            self.profile_index[id(entry)] = len(self.profile_index)
        return entry

    # -- helpers -----------------------------------------------------------------------
    def _copy_bytes(self):
        """void graphc_copy_bytes(i8* dst, i8* src, i64 n)."""
        name = "graphc_copy_bytes"
        if name in self.module.globals:
            return self.module.globals[name]
        i8p = ir.PointerType(I8)
        fn = ir.Function(self.module, ir.FunctionType(VOID, [i8p, i8p, I64]), name)
        fn.linkage = "internal"
        dst, src, n = fn.args
        entry, loop, done = (fn.append_basic_block(x) for x in ("entry", "loop", "done"))
        b = ir.IRBuilder(entry)
        b.cbranch(b.icmp_signed(">", n, ir.Constant(I64, 0)), loop, done)
        b.position_at_end(loop)
        i = b.phi(I64)
        i.add_incoming(ir.Constant(I64, 0), entry)
        b.store(b.load(b.gep(src, [i])), b.gep(dst, [i]))
        nxt = b.add(i, ir.Constant(I64, 1))
        i.add_incoming(nxt, loop)
        b.cbranch(b.icmp_signed("<", nxt, n), loop, done)
        b.position_at_end(done)
        b.ret_void()
        return fn

    def _copy(self, b, dst, src, size) -> None:
        if size:
            b.call(self._copy_bytes(), [dst, src, emit_dim(b, size, self._sizes[1])])

    def _table(self, b, low):
        """A region's table; in a symbolic program its last slot holds the symbols'
        values (the enclosing program's)."""
        i8p = ir.PointerType(I8)
        table = b.alloca(i8p, size=ir.Constant(I64, 1 + len(low.slots) +
                                              (1 if self.symbols else 0)))
        if self.symbols:
            self._set(b, table, 1 + len(low.slots), self._sizes[0])
        return table

    @staticmethod
    def _set(b, table, slot: int, ptr) -> None:
        b.store(ptr, b.gep(table, [ir.Constant(I64, slot)]))

    def _fill_static(self, b, entry, role, table, raw, captures) -> None:
        """Arena, captured values and constants of region `role` (fixed across steps)."""
        kern, low = entry.kernel, entry.kernel.bodies[role]
        i8p = ir.PointerType(I8)
        arena = kern.arenas.get(role)
        self._set(b, table, 0, raw(arena) if arena is not None else ir.Constant(i8p, None))
        for k, buf in captures:
            self._set(b, table, 1 + k, raw(buf))
        for inner, outer in zip(low.constants, kern.constants[role]):
            self._set(b, table, low.slots[inner[0].id], raw(outer))

    @staticmethod
    def _out_slot(low, k: int) -> int:
        return 1 + len(low.inputs) + k

    # -- emission ------------------------------------------------------------------------
    def emit_control(self, b, entry: ControlEntry, pointer, sizes=(None, {})) -> None:
        """Emit the control kernel at `b`'s position; `pointer(buf)` gives an outer
        buffer's typed pointer, `sizes` the symbols' values (their i64* and by name)."""
        i8p = ir.PointerType(I8)
        kern = entry.kernel
        self._sizes = sizes
        # every outer address up front: the branches below must not define them
        ready = {}
        for buf in kern.operands + kern.results + kern.scratch() + \
                [c for cs in kern.constants.values() for c in cs]:
            if buf.id not in ready:
                ready[buf.id] = b.bitcast(pointer(buf), i8p)

        def raw(buf):
            return ready[buf.id]
        op = kern.op
        if op == "scan":
            self._emit_scan(b, entry, raw)
        elif op == "while":
            self._emit_while(b, entry, raw)
        elif op == "cond":
            self._emit_cond(b, entry, raw)
        else:
            raise CompileError(f"unknown control kernel {op}")

    def _carries(self, b, kern, raw, count: int, final_in_result: bool):
        """(current, next) pointer cells per carried value, the initial values copied in.
        With `final_in_result` (an even number of steps) the start buffer is the result;
        else the spare one, so that after the steps the value is in the result."""
        i8p = ir.PointerType(I8)
        cells = []
        for j in range(count):
            res, spare = raw(kern.results[j]), raw(kern.spare[j])
            start, other = (res, spare) if final_in_result else (spare, res)
            self._copy(b, start, raw(kern.operands[j]), kern.results[j].nbytes)
            cur, nxt = b.alloca(i8p), b.alloca(i8p)
            b.store(start, cur)
            b.store(other, nxt)
            cells.append((cur, nxt))
        return cells

    def _final_from_spare(self, b, kern, raw, cells, odd) -> None:
        """After an odd number of steps (the i1 `odd`) of carries that started in the
        results, the final values are in the spare buffers: copy them into the results."""
        with b.if_then(odd):
            for j, (cur, _) in enumerate(cells):
                self._copy(b, raw(kern.results[j]), b.load(cur), kern.results[j].nbytes)

    @staticmethod
    def _loop_head(b, name: str):
        """Start a loop: branch to a new head block and continue there; returns the
        (head, step, done) blocks (the head's test branches to step or done)."""
        func = b.function
        head, body, done = (func.append_basic_block(f"{name}_{x}")
                            for x in ("head", "step", "done"))
        b.branch(head)
        b.position_at_end(head)
        return head, body, done

    @staticmethod
    def _swap(b, cells) -> None:
        for cur, nxt in cells:
            a, c = b.load(cur), b.load(nxt)
            b.store(c, cur)
            b.store(a, nxt)

    def _emit_scan(self, b, entry, raw) -> None:
        kern = entry.kernel
        low = entry.kernel.bodies["body"]
        fn = entry.functions["body"]
        a = kern.attrs
        nc, nx, T, reverse = a["num_carry"], a["num_xs"], a["length"], a["reverse"]
        caps = kern.operands[nc + nx:]
        table = self._table(b, low)
        self._fill_static(b, entry, "body", table, raw,
                          [(nc + nx + k, buf) for k, buf in enumerate(caps)])
        symbolic_T = isinstance(T, Dim)      # the trip count's parity known at the call
        cells = self._carries(b, kern, raw, nc, symbolic_T or T % 2 == 0)
        step_bytes = lambda buf: emit_dim(b, buf.nbytes // max(T, 1), self._sizes[1])
        xs = [(raw(kern.operands[nc + k]), step_bytes(kern.operands[nc + k]))
              for k in range(nx)]
        ys = [(raw(kern.results[nc + k]), step_bytes(kern.results[nc + k]))
              for k in range(len(kern.results) - nc)]
        counter = b.alloca(I64)
        b.store(ir.Constant(I64, 0), counter)
        head, body, done = self._loop_head(b, kern.name)
        i = b.load(counter)
        b.cbranch(b.icmp_signed("<", i, emit_dim(b, T, self._sizes[1])), body, done)
        b.position_at_end(body)
        t = b.sub(emit_dim(b, T - 1, self._sizes[1]), i) if reverse else i
        for j, (cur, nxt) in enumerate(cells):
            self._set(b, table, 1 + j, b.load(cur))
            self._set(b, table, self._out_slot(low, j), b.load(nxt))
        for k, (base, step) in enumerate(xs):
            self._set(b, table, 1 + nc + k, b.gep(base, [b.mul(t, step)]))
        for k, (base, step) in enumerate(ys):
            self._set(b, table, self._out_slot(low, nc + k), b.gep(base, [b.mul(t, step)]))
        b.call(fn, [table])
        self._swap(b, cells)
        b.store(b.add(i, ir.Constant(I64, 1)), counter)
        b.branch(head)
        b.position_at_end(done)
        if symbolic_T:               # an odd number of steps: the final carries are spare
            self._final_from_spare(b, kern, raw, cells, b.trunc(b.load(counter), I1))

    def _emit_while(self, b, entry, raw) -> None:
        kern = entry.kernel
        a = kern.attrs
        ns, ncc = a["num_state"], a["num_cond_captures"]
        clow, blow = entry.kernel.bodies["cond"], entry.kernel.bodies["body"]
        ccaps = kern.operands[ns:ns + ncc]
        bcaps = kern.operands[ns + ncc:]
        ctable, btable = self._table(b, clow), self._table(b, blow)
        self._fill_static(b, entry, "cond", ctable, raw,
                          [(ns + k, buf) for k, buf in enumerate(ccaps)])
        self._fill_static(b, entry, "body", btable, raw,
                          [(ns + k, buf) for k, buf in enumerate(bcaps)])
        flag = raw(kern.flag)
        self._set(b, ctable, self._out_slot(clow, 0), flag)
        cells = self._carries(b, kern, raw, ns, True)
        parity = b.alloca(I1)
        b.store(ir.Constant(I1, 0), parity)
        head, body, done = self._loop_head(b, kern.name)
        for j, (cur, _) in enumerate(cells):
            self._set(b, ctable, 1 + j, b.load(cur))
        b.call(entry.functions["cond"], [ctable])
        go = b.icmp_unsigned("!=", b.load(flag), ir.Constant(I8, 0))
        b.cbranch(go, body, done)
        b.position_at_end(body)
        for j, (cur, nxt) in enumerate(cells):
            self._set(b, btable, 1 + j, b.load(cur))
            self._set(b, btable, self._out_slot(blow, j), b.load(nxt))
        b.call(entry.functions["body"], [btable])
        self._swap(b, cells)
        b.store(b.xor(b.load(parity), ir.Constant(I1, 1)), parity)
        b.branch(head)
        b.position_at_end(done)
        self._final_from_spare(b, kern, raw, cells, b.load(parity))

    def _emit_cond(self, b, entry, raw) -> None:
        kern = entry.kernel
        a = kern.attrs
        no, ntc = a["num_operands"], a["num_true_captures"]
        ops = kern.operands[1:1 + no]
        caps = {"true": kern.operands[1 + no:1 + no + ntc],
                "false": kern.operands[1 + no + ntc:]}
        pred = b.icmp_unsigned("!=", b.load(raw(kern.operands[0])), ir.Constant(I8, 0))
        with b.if_else(pred) as (then, otherwise):
            for role, block in (("true", then), ("false", otherwise)):
                with block:
                    low = entry.kernel.bodies[role]
                    table = self._table(b, low)
                    self._fill_static(b, entry, role, table, raw,
                                      [(no + k, buf) for k, buf in enumerate(caps[role])])
                    for k, buf in enumerate(ops):
                        self._set(b, table, 1 + k, raw(buf))
                    for k, buf in enumerate(kern.results):
                        self._set(b, table, self._out_slot(low, k), raw(buf))
                    b.call(entry.functions[role], [table])
