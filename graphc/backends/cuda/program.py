"""PTX for one GPU architecture and the runtime's launch table; compiling needs no GPU,
only running does."""
from __future__ import annotations

import glob
import math
import os

from graphc_runtime.dims import Dim
from graphc_runtime.errors import CompileError

from ...kernels import kernel as K
from ..llvm.module import aliased_buffers
from ..llvm.symbols import program_symbols
from .emitter import BLOCK, MAX_GRID, PTX_FEATURES, TRIPLE, CudaModuleBuilder


def libdevice_path() -> str | None:
    """libdevice.10.bc from CUDA_HOME, /usr/local/cuda*, or the nvidia-cuda-nvcc wheel."""
    candidates = []
    for root in filter(None, [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH")]):
        candidates += glob.glob(os.path.join(root, "nvvm", "libdevice", "libdevice*.bc"))
    candidates += sorted(glob.glob("/usr/local/cuda*/nvvm/libdevice/libdevice*.bc"), reverse=True)
    try:
        import nvidia.cuda_nvcc as wheel                       # nvidia-cuda-nvcc wheel
        base = os.path.dirname(wheel.__file__) if wheel.__file__ else list(wheel.__path__)[0]
        candidates += glob.glob(os.path.join(base, "nvvm", "libdevice", "libdevice*.bc"))
    except ImportError:
        pass
    return candidates[0] if candidates else None


class PtxProgram:
    """PTX text for one GPU architecture (one of PTX_FEATURES, which CudaBackend checks)
    and the launch table of its kernels."""

    def __init__(self, name: str, lowered, arch: str = "sm_80", opt_level: int = 3):
        from graphc_runtime.cpu import llvm
        b = llvm()
        b.initialize_all_targets()
        b.initialize_all_asmprinters()
        mb = CudaModuleBuilder(name, arch)
        mb.symbols = program_symbols(lowered.buffers.values())
        schedule = _emit_schedule(mb, lowered)
        target = b.Target.from_triple(TRIPLE)
        level = min(max(int(opt_level), 1), 3)        # NVPTX needs its optimizations
        tm = target.create_target_machine(cpu=arch, features=PTX_FEATURES[arch], opt=level)
        mb.module.data_layout = str(tm.target_data)
        try:
            module = b.parse_assembly(str(mb.module))
            if mb.uses_libdevice:
                path = libdevice_path()
                if path is None:
                    raise CompileError("this program needs libdevice (CUDA's math library) "
                                       "for float64 or sin/cos/pow math: install the CUDA "
                                       "toolkit or the nvidia-cuda-nvcc wheel")
                with open(path, "rb") as f:
                    module.link_in(b.parse_bitcode(f.read()))
                _internalize_library(module, {k for k, _, _ in mb.launches})
            module.verify()
        except RuntimeError as e:
            raise CompileError(f"generated NVVM IR is invalid: {e}") from None
        pto = b.create_pipeline_tuning_options(speed_level=level)
        pb = b.create_pass_builder(tm, pto)
        pb.getModulePassManager().run(module, pb)
        self.arch = arch
        self.ptx = tm.emit_assembly(module)
        self.launches = _launch_table(schedule, mb.launches)


def _emit_schedule(mb, lowered) -> list:
    """Emit a Lowered program's kernels; its schedule: ('launch', index into mb.launches,
    lowered) per kernel launch, ('control', kernel, {role: schedule}, lowered) per loop or
    cond (run by the host: the runtime launches the regions' kernels per step)."""
    out = []
    offsets = lowered.memory.offsets
    for kern in lowered.kernels:
        if isinstance(kern, K.ControlKernel):
            out.append(("control", kern, {role: _emit_schedule(mb, low)
                                          for role, low in kern.bodies.items()}, lowered))
            continue
        first = len(mb.launches)
        mb.add_gpu_kernel(kern, aliased_buffers(kern, offsets))
        out += [("launch", k, lowered) for k in range(first, len(mb.launches))]
    return out


def _launch_table(schedule, launches) -> list:
    """The runtime's launch list: kernel launches (buffers as slot or arena offset of
    their program), and control entries with their regions' launch lists (see
    graphc_runtime.cuda)."""
    table = []
    for entry in schedule:
        if entry[0] == "launch":
            _, k, low = entry
            name_, total, bufs = launches[k]
            # a symbolic thread count: the runtime sizes the grid at the launch
            grid = None if isinstance(total, Dim) else max(1, min(math.ceil(total / BLOCK),
                                                                  MAX_GRID))
            table.append({"kernel": name_, "threads": total, "block": BLOCK,
                          "grid": grid, "max_grid": MAX_GRID,
                          # (tiled dots need BLOCK == TILE * TILE threads per block)
                          "buffers": [_where(buf, low) for buf in bufs]})
            continue
        _, kern, bodies, low = entry
        table.append({
            "control": kern.op, "name": kern.name,
            "attrs": {k: v for k, v in kern.attrs.items() if isinstance(v, (int, bool, Dim))},
            "operands": [dict(_where(b, low), bytes=b.nbytes) for b in kern.operands],
            "results": [dict(_where(b, low), bytes=b.nbytes) for b in kern.results],
            "spare": [_where(b, low) for b in kern.spare],
            "flag": _where(kern.flag, low) if kern.flag is not None else None,
            "bodies": {role: {
                "launches": _launch_table(bodies[role], launches),
                "arena": _where(kern.arenas[role], low) if kern.arenas.get(role) else None,
                "slots": 1 + len(body.slots),
                "inputs": len(body.inputs), "outputs": len(body.outputs),
                "constants": [[body.slots[inner.id], _where(outer, low)] for (inner, _), outer
                              in zip(body.constants, kern.constants[role])]}
                for role, body in kern.bodies.items()}})
    return table


def _internalize_library(module, kernels: set) -> None:
    """Give every linked libdevice function internal linkage, so the optimizer keeps only
    those the kernels call. (Left external, all of libdevice reaches the PTX, including
    functions that call NVVM intrinsics an older NVPTX backend cannot lower, such as
    CUDA 13's llvm.nvvm.tanh.approx.f32 under LLVM 20: ptxas then rejects the file.)"""
    for fn in module.functions:
        if not fn.is_declaration and fn.name not in kernels:
            fn.linkage = "internal"


def _where(buf, lowered) -> dict:
    if buf.kind == "temp":
        return {"offset": lowered.memory.offsets[buf.id]}
    return {"slot": lowered.slots[buf.id]}
