"""The kernel IR's types: buffers, value expressions and the kernels.

A kernel is a loop nest over `index` expressions (graphc/kernels/index.py) whose loads
and stores address buffers (views become index arithmetic, never copies). Every kernel
class names its `kind` and answers `reads()` (its Loads: for liveness, aliasing and
traffic), `writes()` (its Stores) and `flops()`; a backend's emitter dispatches by `kind`.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..ir import dtypes
from . import index as ix


class Illegal(Exception):
    """The requested fusion cannot be expressed as one kernel."""


# -- buffers and value expressions ------------------------------------------------------

@dataclass(frozen=True)
class Buffer:
    """A contiguous row-major array the program reads or writes."""
    id: int
    shape: tuple
    dtype: str
    kind: str            # 'input', 'output', 'variable', 'constant', 'temp'
    name: str = ""

    @property
    def nbytes(self):
        """Bytes: an int, or a Dim for a symbolic shape."""
        n = dtypes.itemsize(self.dtype)
        for d in self.shape:
            n = n * d
        return n


@dataclass(frozen=True)
class VExpr:
    dtype: str


@dataclass(frozen=True)
class Load(VExpr):
    buffer: Buffer
    index: tuple


@dataclass(frozen=True)
class Const(VExpr):
    value: object


@dataclass(frozen=True)
class Prim(VExpr):
    op: str
    args: tuple
    attr: object = None       # compare direction / convert source dtype


@dataclass(frozen=True)
class IndexValue(VExpr):
    """The integer value of an index expression (iota)."""
    index: ix.IExpr


@dataclass(frozen=True)
class InRange(VExpr):
    """bool: lo <= index < hi and index % step == 0 (pad/concatenate guards)."""
    index: ix.IExpr
    lo: int
    hi: int
    step: int = 1


@dataclass(frozen=True)
class RngValue(VExpr):
    key0: VExpr
    key1: VExpr
    counter: ix.IExpr
    distribution: str


@dataclass(frozen=True)
class Choose(VExpr):
    """parts[k] where starts[k] <= index < starts[k+1] (concatenate): only the chosen part
    is evaluated (lowered to branches, not a select of every part)."""
    index: ix.IExpr
    starts: tuple
    parts: tuple


@dataclass(frozen=True)
class Acc(VExpr):
    """The finished accumulator of stage `stage` of a row/dot/conv kernel."""
    stage: int


# -- kernels -------------------------------------------------------------------------

@dataclass
class Store:
    buffer: Buffer
    value: VExpr
    index: tuple


class Kernel:
    """What every kernel answers: its `kind`, the Loads it reads (`reads()`: for
    liveness, aliasing and traffic) and the Stores it writes (`writes()`), each class
    its own, and its multiply-adds counted as two flops each (`flops()`: none unless it
    computes products)."""
    kind = ""

    def flops(self) -> int:
        return 0


@dataclass
class LoopKernel(Kernel):
    """for index in shape: every store (at that index)."""
    name: str
    shape: tuple
    loop_vars: tuple
    stores: list
    kind = "loop"

    def reads(self) -> list:
        return loads_of([s.value for s in self.stores])

    def writes(self) -> list:
        return list(self.stores)


@dataclass
class Reduction:
    kind: str            # 'sum', 'max', 'min', 'prod', 'argmax', 'argmin'
    value: VExpr         # evaluated at the full index
    dtype: str           # result dtype (index dtype for arg reductions)
    acc_dtype: str       # accumulation dtype


@dataclass
class RowKernel(Kernel):
    """for row in kept: reductions over the reduced dims (in order), then stores.

    full_index maps the loop variables to an index into the reduced operand's shape.
    """
    name: str
    kept_shape: tuple
    kept_vars: tuple
    reduced_shape: tuple
    reduced_vars: tuple
    full_index: tuple
    reductions: list
    row_stores: list          # stores at the row index (after all reductions)
    full_stores: list         # stores over the reduced dims (after all reductions)
    row_values: list = field(default_factory=list)   # per stage (+1 for the stores):
    # expressions that depend on the row only, evaluated once per row before that stage
    stashed: list = field(default_factory=list)      # (stage, expr): full-index values
    # computed in that stage's loop and kept in a row-sized scratch for later loops
    stage_stores: list = field(default_factory=list)  # stores over the reduced dims made
    # in the last stage's loop (their values need none of its result): one pass, values
    # the stage computes anyway not computed again
    kind = "row"

    def reads(self) -> list:
        return loads_of([r.value for r in self.reductions] +
                        [s.value for s in self.row_stores + self.stage_stores +
                         self.full_stores])

    def writes(self) -> list:
        return self.row_stores + self.stage_stores + self.full_stores


@dataclass
class DotKernel(Kernel):
    """out[b, m, n] = sum_k lhs(b, m, k) * rhs(b, k, n); then the epilogue stores."""
    name: str
    out: Buffer
    batch_vars: tuple
    m_vars: tuple
    n_vars: tuple
    k_vars: tuple
    out_index: tuple
    lhs: VExpr
    rhs: VExpr
    acc_dtype: str
    epilogue: list            # stores at out_index; Acc(0) is the dot's value
    fills: list = field(default_factory=list)   # (loop vars, Store): constants stored
    # around the epilogue's padded results (their borders), per batch and m index
    private_out: bool = False  # out is read by no other kernel (its epilogue reads the
    # product as Acc(0)): a backend may keep each batch index's product in a scratch
    layouts: list = field(default_factory=list)  # (loop vars, Store): results of another
    # shape (the product rearranged: a transposed or phase-split copy), each a nest run
    # per batch index after its product; their Loads of `out` read that batch index's
    # product (K.layout_epilogue)
    private_layouts: set = field(default_factory=set)  # ids of layout buffers only this
    # kernel's later nests read: a backend may keep each batch index's in a scratch
    packed_int8: str = ""   # "us" / "su": int32 words of four bytes each side, unsigned
    # x signed or signed x unsigned (dot_general's packed_int8): a term four products
    kind = "dot"

    def reads(self) -> list:
        return loads_of([self.lhs, self.rhs] + [s.value for s in self.epilogue] +
                        [s.value for _, s in self.layouts])

    def writes(self) -> list:
        return [Store(self.out, Acc(self.out.dtype, 0), self.out_index)] + \
            self.epilogue + [store for _, store in self.fills + self.layouts]

    def flops(self) -> int:
        """Multiply-adds, counted as two flops each."""
        return 2 * extent(self.batch_vars + self.m_vars + self.n_vars + self.k_vars)


@dataclass
class WinogradKernel(DotKernel):
    """A 3x3 stride-1 convolution by F(2x2, 3x3) (ir/ops/winograd.py): lhs loads the
    filters' transform u (16, O, C) at (0, m, k), rhs the padded input (N, C, H+2, W+2)
    at (b, k, n0, n1), the corner of output (n0, n1)'s window; out[b, m, n0, n1] is the
    convolution, then the epilogue as a DotKernel's. Only a backend that knows this
    kernel runs it (the CPU's); its loads name what it reads."""

    def flops(self) -> int:
        """16 products per 2 x 2 outputs (against 36 for the direct product)."""
        return 8 * extent(self.batch_vars + self.m_vars + self.n_vars + self.k_vars)


@dataclass
class ConvKernel(Kernel):
    """out[n, o, *sp] = sum over (c, *window) of guarded input * kernel; then epilogue."""
    name: str
    out: Buffer
    out_vars: tuple
    red_vars: tuple
    out_index: tuple
    term: VExpr               # guarded product at (out_vars, red_vars)
    acc_dtype: str
    epilogue: list
    kind = "conv"

    def reads(self) -> list:
        return loads_of([self.term] + [s.value for s in self.epilogue])

    def writes(self) -> list:
        return [Store(self.out, Acc(self.out.dtype, 0), self.out_index)] + self.epilogue

    def flops(self) -> int:
        return 2 * extent(self.out_vars) * extent(self.red_vars)


@dataclass
class ScatterKernel(Kernel):
    """out = operand; then for u in updates' shape: out[target(u)] += update(u)."""
    name: str
    out: Buffer
    copy: LoopKernel
    upd_shape: tuple
    upd_vars: tuple
    target: tuple
    update: VExpr
    kind = "scatter"

    def reads(self) -> list:
        # the target's gathered indices read data too
        return loads_of([s.value for s in self.copy.stores] + [self.update], self.target)

    def writes(self) -> list:
        return [Store(self.out, self.update, self.target)]


@dataclass
class CollectiveKernel(Kernel):
    """A collective across processes (MPI): dst = op(src over all ranks)."""
    name: str
    op: str                  # all_reduce, all_gather, reduce_scatter
    attrs: dict
    src: Buffer
    dst: Buffer
    kind = "collective"

    def reads(self) -> list:
        return _whole_loads([self.src])

    def writes(self) -> list:
        return _whole_stores([self.dst])


@dataclass
class ControlKernel(Kernel):
    """A loop or cond run inside the program: its regions compiled as nested programs.

    `bodies` maps a region's role ('body', 'cond', 'true', 'false') to its Lowered
    program (own kernels, slots and arena); `operands` are the node's inputs (outer
    buffers, in order), `results` where each result goes. `spare` holds the second buffer
    of each loop-carried value (scan/while: the body writes the next value there while
    reading the current one, then the two swap), `arenas` a scratch buffer per region for
    its temporaries (None when it needs none), `constants` the outer buffers of each
    region's constants, in the region's order.
    """
    name: str
    op: str                   # scan, while, cond
    attrs: dict               # length, reverse, num_carry, ... (no regions)
    bodies: dict
    operands: list
    results: list
    spare: list = field(default_factory=list)
    arenas: dict = field(default_factory=dict)
    constants: dict = field(default_factory=dict)
    flag: "Buffer | None" = None     # while: the cond region's bool result

    kind = "control"

    def scratch(self) -> list:
        return [b for b in self.spare + list(self.arenas.values()) + [self.flag]
                if b is not None]

    def reads(self) -> list:
        return _whole_loads(self.operands)

    def writes(self) -> list:            # results and scratch: live at this kernel
        return _whole_stores(self.results + self.scratch())


def _whole_loads(buffers) -> list:
    """Loads standing for a kernel that reads these buffers outside any expression
    (collectives, loops): for liveness and alias checks."""
    return [Load(b.dtype, b, tuple(ix.const(0) for _ in b.shape)) for b in buffers]


def _whole_stores(buffers) -> list:
    return [Store(b, Const(b.dtype, 0), tuple(ix.const(0) for _ in b.shape)) for b in buffers]


def loads_of(exprs, indices=()) -> list[Load]:
    """Every Load under the value expressions `exprs` and the index expressions
    `indices` (gathers read data in their indices)."""
    found, seen = [], set()

    def walk(e):
        if id(e) in seen:
            return
        seen.add(id(e))
        if isinstance(e, Load):
            found.append(e)
            for i in e.index:
                walk_index(i)
        elif isinstance(e, Prim):
            for x in e.args:
                walk(x)
        elif isinstance(e, Choose):
            walk_index(e.index)
            for x in e.parts:
                walk(x)
        elif isinstance(e, RngValue):
            walk(e.key0), walk(e.key1)

    def walk_index(i):
        if isinstance(i, ix.IFromValue):
            walk(i.value)
        for f in ("a", "b"):
            if hasattr(i, f):
                walk_index(getattr(i, f))

    for e in exprs:
        walk(e)
    for i in indices:
        walk_index(i)
    return found


def extent(vars_) -> int:
    """Iterations of a loop nest over `vars_` (constants in the list count once)."""
    n = 1
    for v in vars_:
        if isinstance(v, ix.IVar):
            n = n * ix.extent_of(v)
    return n
