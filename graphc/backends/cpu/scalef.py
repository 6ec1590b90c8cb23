"""AVX-512's vscalefps for the float32 exp's final scale, with any LLVM.

exp (backends/llvm/mathlib.py) ends with y * 2**n, rounded once. On AVX-512 that is one
vscalefps; LLVM 22's loop vectorizer widens llvm.ldexp into it, LLVM 20's (llvmlite 0.47,
what numba 0.65 pins) leaves a loop calling it scalar. So the kernels call
`graphc_scalef(y, n)` (n a float32 integer) instead, and this module links in its
definition: a scalar body by exponent bits (two multiplies, the first exact: the same
bits as vscalefps) that the vectorizer never inlines, with vector variants of 4, 8 and 16
lanes on vscalefps named by the vector-function ABI attribute, so every LLVM widens the
loop with them; after optimization they are inlined (`inline_variants`). The float
exponent needs no conversion to integers, two instructions fewer than ldexp's.
"""
from __future__ import annotations

NAME = "graphc_scalef"
# lanes, the intrinsic's width, its mask (and rounding) parameters' types and values
_WIDTHS = ((16, "512", "i16, i32", "i16 -1, i32 4"), (8, "256", "i8", "i8 -1"),
           (4, "128", "i8", "i8 -1"))


def _helper_ir() -> str:
    variants = ",".join(f"_ZGV_LLVM_N{w}vv_{NAME}({NAME}_v{w})" for w, *_ in _WIDTHS)
    lines = [f"""define float @{NAME}(float %y, float %n) #0 {{
  %ni = fptosi float %n to i32
  %n1 = ashr i32 %ni, 1
  %n2 = sub i32 %ni, %n1
  %e1 = add i32 %n1, 127
  %b1 = shl i32 %e1, 23
  %p1 = bitcast i32 %b1 to float
  %e2 = add i32 %n2, 127
  %b2 = shl i32 %e2, 23
  %p2 = bitcast i32 %b2 to float
  %t = fmul float %y, %p1
  %r = fmul float %t, %p2
  ret float %r
}}"""]
    for w, bits, mask_types, mask in _WIDTHS:
        v, intrinsic = f"<{w} x float>", f"@llvm.x86.avx512.mask.scalef.ps.{bits}"
        lines.append(f"declare {v} {intrinsic}({v}, {v}, {v}, {mask_types})")
        lines.append(f"define {v} @{NAME}_v{w}({v} %y, {v} %n) #1 {{\n"
                     f"  %r = call {v} {intrinsic}({v} %y, {v} %n, {v} undef, {mask})\n"
                     f"  ret {v} %r\n}}")
    used = ", ".join(f"ptr @{NAME}_v{w}" for w, *_ in _WIDTHS)
    lines.append(f'@llvm.compiler.used = appending global [{len(_WIDTHS)} x ptr] [{used}], '
                 f'section "llvm.metadata"')
    lines.append(f'attributes #0 = {{ noinline nounwind memory(none) '
                 f'"vector-function-abi-variant"="{variants}" }}')
    lines.append("attributes #1 = { alwaysinline nounwind memory(none) }")
    return "\n".join(lines) + "\n"


def available(features: list) -> bool:
    """Does the host have the instructions (AVX-512F; VL for 4 and 8 lanes)?"""
    return "+avx512f" in features and "+avx512vl" in features


def link(module) -> bool:
    """Link the definitions into `module` (llvmlite.binding) where it calls graphc_scalef;
    True when it did."""
    from graphc_runtime.cpu import llvm
    try:
        fn = module.get_function(NAME)
    except NameError:
        return False
    if not fn.is_declaration:
        return True
    b = llvm()
    helper = b.parse_assembly(_helper_ir())
    helper.triple = module.triple
    helper.data_layout = module.data_layout
    module.link_in(helper)
    for name in (NAME, *(f"{NAME}_v{w}" for w, *_ in _WIDTHS)):
        module.get_function(name).linkage = "internal"
    return True


def inline_variants(module, target_machine) -> None:
    """Inline the vector variants the vectorizer called (they are alwaysinline)."""
    from graphc_runtime.cpu import llvm
    b = llvm()
    pb = b.create_pass_builder(target_machine, b.create_pipeline_tuning_options())
    mpm = b.create_new_module_pass_manager()
    mpm.add_always_inliner_pass()
    mpm.run(module, pb)
