"""A result the memory plan puts at exactly its operand's arena range (computed in place)
is read and written through one pointer (backends/llvm/module.py: twin_buffers), even
where the two dtypes differ but have one element size (int32 written over float32, as
a quantize does): two pointers that may overlap would keep LLVM's loops scalar."""
import re

from graphc.backends.cpu.module import ModuleBuilder
from graphc.backends.llvm.module import aliased_buffers, twin_buffers
from graphc.kernels import kernel as K


def _quantize_kernel(out_dtype="int32"):
    """b2 = int(round(b1 * 3)) over 64 x 64: b1 float32, b2 `out_dtype`, both temps."""
    shape = (64, 64)
    src = K.Buffer(1, shape, "float32", "temp", "b1")
    dst = K.Buffer(2, shape, out_dtype, "temp", "b2")
    vars_ = K.loop_vars(shape)
    scaled = K.Prim("float32", "mul", (K.Load("float32", src, vars_),
                                       K.Const("float32", 3.0)))
    value = K.Prim(out_dtype, "convert", (K.Prim("float32", "round", (scaled,)),), "float32")
    return K.LoopKernel("k0_loop", shape, vars_, [K.Store(dst, value, vars_)])


def test_a_result_of_another_dtype_at_its_operands_range_is_its_twin():
    kern = _quantize_kernel()
    twins = twin_buffers(kern, {1: 0, 2: 0})
    assert twins == {1: 1, 2: 1}
    assert aliased_buffers(kern, {1: 0, 2: 0}, twins) == set()
    assert aliased_buffers(kern, {1: 0, 2: 0}) == {1, 2}      # without: may overlap
    assert twin_buffers(kern, {1: 0, 2: 16384}) == {}          # apart: not twins
    assert twin_buffers(kern, {1: 0, 2: 64}) == {}             # overlapping, not equal
    wide = _quantize_kernel("int64")                           # other element size
    assert twin_buffers(wide, {1: 0, 2: 0}) == {}


def test_twins_are_one_pointer_in_the_kernel_function():
    kern = _quantize_kernel()
    twins = twin_buffers(kern, {1: 0, 2: 0})
    mb = ModuleBuilder("m")
    mb.add_kernel(kern, aliased_buffers(kern, {1: 0, 2: 0}, twins), twins=twins)
    text = str(mb.module)
    fn = text[text.index('define internal void @"k0_loop"'):]
    fn = fn[:fn.index("\n}")]
    head = fn.splitlines()[0]
    assert head.count("noalias") == 2, head          # nothing may overlap now
    # the int32 stores go through the float32 argument, seen as int32
    assert re.search(r'bitcast float\* %"\.1" to i32\*', fn), fn
    assert '%".2"' not in fn.split("\n", 1)[1], fn    # the second argument is never used
