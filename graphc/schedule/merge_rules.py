"""Which two fusion groups may merge into one kernel (schedule/fusion.py's _merge asks):
the merged kind, the size and depth limits, a product's epilogue (elementwise over its
output, a padded copy, a per-image layout), a row kernel's single reduction domain.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from graphc_runtime.dims import prod

from ..ir.graph import Node
from ..ir.primitive import is_transcendental
from ..kernels import kernel as K

if TYPE_CHECKING:
    from .fusion import Group

MAX_GROUP_NODES = 400         # size limit of one kernel
MAX_GROUP_DEPTH = 128         # longest chain of ops inside one kernel (the kernel builders
                              # and emitters recurse once per level of the expression)


def merged_kind(a: Group, b: Group):
    kinds = {a.kind, b.kind}
    if kinds <= {"loop"}:
        return "loop"
    if kinds <= {"loop", "row"}:
        return "row"
    if kinds in ({"dot", "loop"}, {"conv", "loop"}):
        return (kinds - {"loop"}).pop()
    return None


def _depth(members: dict) -> int:
    """The longest chain of member nodes (inputs before users: ids are topological)."""
    depth = {}
    for nid in sorted(members):
        depth[nid] = 1 + max((depth.get(i.id, 0) for i in members[nid].inputs), default=0)
    return max(depth.values(), default=0)


def _group_depth(g: Group) -> int:
    """_depth of a group's members, kept on the group (its members never change)."""
    depth = g.__dict__.get("_depth")
    if depth is None:
        depth = g.__dict__["_depth"] = _depth(g.members)
    return depth


def compatible(a: Group, b: Group, producer_consumer: bool, pads: bool = False) -> bool:
    """Whether groups a and b can merge; `pads`: a dot's epilogue may also write a padded
    copy of its result (the CPU's dot kernels fill the border, K.padded_epilogue) or a
    rearranged one per image (layout_fits)."""
    kind = merged_kind(a, b)
    if kind is None:
        return False
    if len(a.members) + len(b.members) > MAX_GROUP_NODES:
        return False
    # the groups form a DAG, so a chain through both runs through a, then b (or the
    # reverse): the sum of their depths bounds the merged one's
    if _group_depth(a) + _group_depth(b) > MAX_GROUP_DEPTH and \
            _depth({**a.members, **b.members}) > MAX_GROUP_DEPTH:
        return False
    if kind == "loop":
        return a.shape() == b.shape()
    if kind in ("dot", "conv"):
        if not producer_consumer:
            return False
        anchor = a.anchor or b.anchor
        other = b if a.anchor is not None else a
        # the epilogue runs over the anchor's output: only elementwise, same shape (or,
        # for a dot, that padded: the next convolution's input written in place); a
        # window over what the anchor's group writes (a depthwise convolution over its
        # padded output) makes layout nests, run image by image
        windowed = _windows_into(other, a if other is b else b)
        return all((r.shape == anchor.shape or K.reshaped_epilogue(r, anchor)) and
                   not windowed or pads and kind == "dot" and
                   (not windowed and K.padded_epilogue(r, anchor) or
                    layout_fits(r, anchor))
                   for r in other.roots) and \
            (a.anchor is not None and a.kind in ("dot", "conv"))
    # row: every reduction over one domain; loop parts over that domain or its rows. A
    # row kernel reads its operands in more than one pass (a norm's mean, then each
    # element minus it), along its rows: a depthwise convolution's terms (windows over
    # another layout) and values gathered in short runs (a max pool's gradient put back
    # from its 2 x 2 windows) are written once by their own kernel instead
    if producer_consumer and a.kind == "loop" and b.kind == "row" and \
            any(m.op == "window_view" or m.op == "transpose" and _short_runs(m)
                for m in a.members.values()):
        return False
    sigs = {K.reduction_signature(m) for g in (a, b) for m in g.members.values()
            if m.op in K.REDUCE_KIND}
    if len(sigs) != 1:
        return False
    shape, axes = sigs.pop()
    kept = tuple(n for d, n in enumerate(shape) if d not in axes)
    if _one_long_row(shape, kept) and any(r.shape == shape for g in (a, b) for r in g.roots):
        return False
    return all(r.shape in (shape, kept) for g in (a, b) for r in g.roots)


SHORT_RUN = 8     # contiguous elements: a transpose reading fewer at a time is gathering


def _short_runs(transpose: Node) -> bool:
    """Whether a transpose keeps its minor axis but reads it in runs of fewer than
    SHORT_RUN contiguous elements (a transpose moving the minor axis reads with one
    stride, which the row kernels take well: attention's K transposed)."""
    perm = transpose.attrs["permutation"]
    last = transpose.shape[-1] if transpose.shape else SHORT_RUN
    return perm[-1] == len(perm) - 1 and isinstance(last, int) and last < SHORT_RUN


SERIAL_ROW_LIMIT = 1 << 15    # elements of a whole-tensor reduction's one row up to which
# it stays one row kernel with what it computes over that domain (one thread runs a row)


def _one_long_row(shape, kept) -> bool:
    """Whether a reduction has one row (of the whole tensor) longer than SERIAL_ROW_LIMIT:
    its producers and consumers over the full domain then stay loop kernels the threads
    share, not passes of one thread's row (DynamicQuantizeLinear's min and max over a
    128 x 3072 activation: its GELU and quantize ran on one thread, twice over)."""
    if not all(isinstance(n, int) for n in shape):
        return False
    return prod(kept) == 1 and prod(shape) > SERIAL_ROW_LIMIT


def _windows_into(g: Group, target: Group) -> bool:
    """Whether a window_view of g reads a member of target (directly or reshaped in g)."""
    for m in g.members.values():
        if m.op != "window_view":
            continue
        x = m.inputs[0]
        while x.op == "reshape" and x.id in g.members:
            x = x.inputs[0]
        if x.id in target.members:
            return True
    return False


LAYOUT_PRODUCT_BYTES = 512 << 10    # one image's product, read back from the cache by a
# layout epilogue (the CPU's dot kernels keep it in a scratch of that size)


def layout_fits(root: Node, dot: Node) -> bool:
    """Whether the CPU's dot kernel should write `root` (the product rearranged, such as
    the phase planes a strided depthwise convolution reads) per image, right after that
    image's product (K.layout_epilogue): one image's product must stay in the core's
    cache. Threads then take whole images, or share an image by its rows where the
    kernel's nests allow (the policy's threads_fit, on the kernel built)."""
    if not K.layout_epilogue(root, dot) or _costly_transpose(root, dot):
        return False
    images = max(dot.shape[0], 1)
    if len(dot.attrs["lhs_batch"]) == 2:       # grouped: each image's groups one by one
        return dot.nbytes // max(images * dot.shape[1], 1) <= LAYOUT_PRODUCT_BYTES
    per_image = dot.nbytes // images
    if per_image <= LAYOUT_PRODUCT_BYTES:
        return True
    # larger: the kernel runs an image's product and the nests block by block of its rows
    # (backends/cpu/dots.channel_block), each block reading the other operand again
    rows = dot.shape[1] if dot.ndim > 2 else None
    return isinstance(rows, int) and \
        per_image * min(LAYOUT_BLOCK_ROWS, rows) // rows <= LAYOUT_PRODUCT_BYTES and \
        dot.inputs[1].nbytes // images <= LAYOUT_OPERAND_BYTES


def _costly_transpose(root: Node, dot: Node, limit: int = 64) -> bool:
    """Whether `root` transposes (the phase planes of a strided depthwise convolution) a
    math function of the product (SiLU's logistic): a layout nest evaluates it per
    element in the transposed order, in short strided runs. The product's own epilogue
    evaluates it along its rows instead (fusion._math_under_transpose), and a loop
    kernel copies it into the planes (EfficientNet's 16 -> 96 channels at 112 x 112 with
    SiLU, then its depthwise 3 x 3 at stride 2: 1.8 ms as one kernel, 0.7 in three; with
    ReLU6 0.5 ms as one). Looks at the nodes between the product and root (up to
    `limit` nodes visited)."""
    on_path: dict = {dot.id: True}
    between = []                   # the nodes computed from the product, up to root
    budget = [limit]

    def reaches(n) -> bool:        # whether n is computed from the product
        if n.id not in on_path:
            budget[0] -= 1
            on_path[n.id] = budget[0] > 0 and any([reaches(x) for x in n.inputs])
            if on_path[n.id]:
                between.append(n)
        return on_path[n.id]
    if not reaches(root) or budget[0] <= 0:
        return False
    return any(n.op == "transpose" for n in between) and \
        any(is_transcendental(n.op) for n in between)


LAYOUT_BLOCK_ROWS = 8             # the fewest rows of a block (dots.channel_block)
LAYOUT_OPERAND_BYTES = 1 << 20    # the other operand of an image's product, read again
# for each block: a MobileNetV2-sized expansion (16 channels at 112 x 112, 0.8 MB) joins
# its phase planes; ResNeXt's 128 channels at 56 x 56 (1.6 MB, 32 blocks) ran 1.7x slower
