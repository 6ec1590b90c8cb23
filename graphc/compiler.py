"""gc.compile: graph -> optimized program -> fused kernels -> one native module."""
from __future__ import annotations

import os
import time

from graphc_runtime.cpu import CpuProgram, Signature
from graphc_runtime.dims import Dim, shape_symbols
from graphc_runtime.errors import CompileError, DeviceError, GraphcError

from .api import Tensor, checked_updates, flatten_outputs, _graph_of, structure_of
from .codegen import cpu as cpu_codegen
from .kernels.lower import lower
from .executable import Executable
from .ir import dtypes
from .ir.source import user_location
from .passes import fusion, memory
from .passes.manager import PassManager
from .passes.pipeline import default_pipeline
from .passes.program import Program

KNOWN_OPTIONS = {"dump_dir", "fuse", "opt_level", "num_threads", "distributed", "arch",
                 "winograd"}


def compile(outputs, inputs=None, updates=None, device: str = "cpu", **options) -> Executable:  # noqa: A001
    """Compile `outputs` (a Tensor, list or dict) and `updates` ({variable: new value})."""
    start = time.perf_counter()
    loc = user_location()
    unknown = set(options) - KNOWN_OPTIONS
    if unknown:
        raise CompileError(f"unknown compile option(s): {', '.join(sorted(unknown))}; known: "
                           f"{', '.join(sorted(KNOWN_OPTIONS))}", loc)
    device = str(device)
    kind, _, index = device.partition(":")
    if kind not in ("cpu", "cuda") or (index and not index.isdigit()) or \
            (kind == "cpu" and index not in ("", "0")):
        raise DeviceError(f"unknown device {device!r}; devices are cpu and cuda[:N]", loc)
    num_threads = options.get("num_threads")
    if num_threads is None:
        env = os.environ.get("GRAPHC_NUM_THREADS", "")
        try:
            num_threads = int(env) if env else (os.cpu_count() or 1)
        except ValueError:
            raise CompileError(f"GRAPHC_NUM_THREADS must be a positive int, got {env!r}",
                               loc) from None
        if not env and options.get("distributed") is not None and \
                getattr(options["distributed"], "world", 1) > 1:
            # processes on one machine share its cores (graphc's threads and BLAS's)
            from graphc_runtime import blas, collectives
            num_threads = max(1, num_threads // collectives.local_size())
            blas.set_threads(num_threads)
    if not isinstance(num_threads, int) or isinstance(num_threads, bool) or num_threads < 1:
        raise CompileError(f"num_threads must be a positive int, got {num_threads!r}", loc)

    winograd = options.get("winograd", True)
    if not isinstance(winograd, bool):
        raise CompileError(f"winograd must be True or False, got {winograd!r}", loc)

    flat, rebuild = flatten_outputs(outputs)
    upd_vars, upd_vals = checked_updates(updates)
    everything = flat + upd_vals
    if not everything:
        raise CompileError("nothing to compile: no outputs and no updates", loc)
    graph = _graph_of(everything + upd_vars)
    program = Program(graph, [t.node for t in flat],
                      [(v.name, nv.node) for v, nv in zip(upd_vars, upd_vals)],
                      {"device": kind, "winograd": winograd, "threads": num_threads})

    pm = PassManager(default_pipeline(), options.get("dump_dir"))
    optimized = pm.run(program)
    seconds = dict(pm.seconds)

    t0 = time.perf_counter()
    plan = fusion.plan(optimized, fuse=options.get("fuse", True))
    seconds["fusion"] = time.perf_counter() - t0

    needed = {n.id for n in optimized.live_nodes() if n.op == "parameter"}
    if inputs is None:
        input_nodes = [n for n in optimized.graph.placeholders() if n.id in needed]
    else:
        by_name = {n.attrs["name"]: n for n in optimized.graph.placeholders()}
        input_nodes = []
        for t in inputs:
            if not isinstance(t, Tensor) or t.node.op != "parameter":
                raise GraphcError(f"inputs must be placeholders, got {t!r}", loc)
            name = t.node.attrs["name"]
            input_nodes.append(by_name.get(name) or t.node)   # unused inputs are accepted
        missing = needed - {n.id for n in input_nodes}
        if missing:
            names = [n.attrs["name"] for n in optimized.graph.nodes if n.id in missing]
            raise GraphcError(f"the outputs need placeholder(s) {', '.join(names)} that are "
                              f"not in `inputs`", loc)

    _check_symbols(optimized, input_nodes, loc)
    t0 = time.perf_counter()
    lowered = lower(optimized, plan, input_nodes,
                    cpu_codegen.scratch_buffers if kind == "cpu" else None)
    seconds["schedule_and_memory"] = time.perf_counter() - t0

    if kind == "cuda":
        return _compile_cuda(graph, optimized, plan, lowered, input_nodes, outputs, rebuild,
                             pm, seconds, start, options, device, source=program)

    t0 = time.perf_counter()
    llvm_ir = cpu_codegen.emit_module(graph.name, lowered, num_threads)
    seconds["codegen"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    native_module = cpu_codegen.NativeModule(llvm_ir, options.get("opt_level", 3))
    seconds["llvm"] = time.perf_counter() - t0
    sig = _signature(graph, input_nodes, lowered, outputs)
    collectives = collective_steps(lowered)
    native = CpuProgram(native_module.object_code, sig, lowered.memory.arena_bytes,
                        {name: graph.variables[name] for name in lowered.variables},
                        [c for _, c in lowered.constants], collectives)

    chained = cpu_codegen.chain_plan(lowered.kernels, num_threads, lowered.memory.offsets)
    stats = _stats(plan, lowered, len(lowered.kernels), seconds, start, num_threads=num_threads,
                   chained_kernels=[(lowered.kernels[t].name, lowered.kernels[t + 1].name)
                                    for t in sorted(chained)])
    dumps = _dumps(pm, plan, lowered, llvm=native_module.optimized_ir)
    from .artifact_info import describe_program
    info = describe_program(optimized, plan, lowered,
                            {"triple": native_module.triple, "cpu": native_module.cpu,
                             "features": native_module.features},
                            {"object": bytes(native_module.object_code)}, structure_of(outputs),
                            source=program)
    info["manifest"]["collectives"] = collectives
    opt_level = options.get("opt_level", 3)
    info["profile_object"] = lambda: cpu_codegen.NativeModule(cpu_codegen.emit_module(
        graph.name, lowered, num_threads, profile=True), opt_level).object_code
    exe = Executable(native, rebuild, stats, dumps, device="cpu", module=native_module,
                     info=info)
    if options.get("distributed") is not None:
        options["distributed"].setup(exe, optimized)
    return exe


def _symbols_of(node) -> set:
    out = shape_symbols(node.shape)
    if node.op == "dim_size" and isinstance(node.attrs["size"], Dim):
        out |= node.attrs["size"].symbols()
    return out


def _check_symbols(program, input_nodes, loc) -> None:
    """Every symbolic size the program uses must come from one of its inputs (that is
    where the call binds it)."""
    bound = set()
    for n in input_nodes:
        bound |= shape_symbols(n.shape)
    for n in program.live_nodes():
        missing = _symbols_of(n) - bound
        if missing:
            raise CompileError(f"{n.describe()} uses the symbolic size {sorted(missing)[0]!r}, "
                               f"which no input of the executable has, so no call could give "
                               f"it a value", loc)


def _stats(plan, lowered, kernels: int, seconds: dict, start: float, **extra) -> dict:
    """Executable.stats: kernel count, memory figures, per-pass and total compile time."""
    return {
        "kernels": kernels,
        "fusion_groups": len(plan.groups),
        "arena_bytes": lowered.memory.arena_bytes,
        "live_bytes_lower_bound": lowered.memory.live_bytes_lower_bound,
        "naive_bytes": lowered.naive_bytes,
        "compile_seconds": time.perf_counter() - start,
        "pass_seconds": seconds,
        "kernel_bytes": [{"kernel": n, "read": r, "written": w} for n, r, w in lowered.traffic],
        "in_place_updates": list(lowered.in_place_updates),
        "copied_updates": list(lowered.copied_updates),
        **extra,
    }


def _dumps(pm, plan, lowered, **code) -> dict:
    """Text of every stage; `code` adds the backend's (llvm= or ptx=)."""
    return {"graph": pm.dumps["input"], "optimized": pm.dumps["dce"],
            "fused": fusion.describe(plan),
            "memory": memory.describe(lowered.memory, {b.id: b.name for b in
                                                       lowered.buffers.values()}),
            **code}


def output_names(outputs, count: int) -> list:
    """Readable names for the flattened outputs: dict keys, else out0, out1..."""
    names = []

    def walk(obj, prefix):
        if isinstance(obj, Tensor):
            names.append(prefix)
        elif isinstance(obj, dict):
            for k, v in obj.items():
                walk(v, str(k) if prefix == "out" else f"{prefix}.{k}")
        else:
            for k, v in enumerate(obj):
                walk(v, f"{prefix}{k}" if prefix == "out" else f"{prefix}.{k}")
    walk(outputs, "out")
    return names if len(names) == count else [f"out{k}" for k in range(count)]


def collective_steps(lowered) -> list:
    """The collectives between native segments, with where their buffers live (a table
    slot for inputs/outputs/variables/constants, an arena offset for temporaries)."""
    from .kernels import kernel as K

    def where(buf):
        if buf.kind == "temp":
            return {"offset": lowered.memory.offsets[buf.id]}
        return {"slot": lowered.slots[buf.id]}
    steps = []
    for kern in lowered.kernels:
        if isinstance(kern, K.CollectiveKernel):
            steps.append({"op": kern.op, "attrs": {k: v for k, v in kern.attrs.items()},
                          "src": dict(where(kern.src), shape=list(kern.src.shape),
                                      dtype=kern.src.dtype),
                          "dst": dict(where(kern.dst), shape=list(kern.dst.shape),
                                      dtype=kern.dst.dtype)})
    return steps


def _signature(graph, input_nodes, lowered, outputs):
    from .codegen.cpu.symbols import program_symbols
    return Signature(
        symbols=program_symbols(lowered.buffers.values()),
        inputs=[(n.attrs["name"], n.shape, n.dtype) for n in input_nodes],
        outputs=[(name, b.shape, b.dtype) for name, b in
                 zip(output_names(outputs, len(lowered.outputs)), lowered.outputs)],
        variables=[(name, graph.variables[name].shape,
                    dtypes.canonical(graph.variables[name].dtype)) for name in lowered.variables])


def _compile_cuda(graph, optimized, plan, lowered, input_nodes, outputs, rebuild, pm, seconds,
                  start, options, device, source=None):
    """PTX for the GPU (no GPU needed to compile; running needs one)."""
    from graphc_runtime.cuda import CudaProgram
    from .codegen.cuda import PtxProgram
    t0 = time.perf_counter()
    ptx = PtxProgram(graph.name, lowered, options.get("arch", "sm_80"))
    seconds["ptx"] = time.perf_counter() - t0
    sig = _signature(graph, input_nodes, lowered, outputs)
    native = CudaProgram(ptx.ptx, ptx.arch, ptx.launches, sig, lowered.memory.arena_bytes,
                         {name: graph.variables[name] for name in lowered.variables},
                         [c for _, c in lowered.constants])
    stats = _stats(plan, lowered, len(ptx.launches), seconds, start, arch=ptx.arch)
    dumps = _dumps(pm, plan, lowered, ptx=ptx.ptx)
    from .artifact_info import describe_program
    info = describe_program(optimized, plan, lowered, {"arch": ptx.arch},
                            {"ptx": ptx.ptx.encode()}, structure_of(outputs), device="cuda",
                            source=source)
    info["manifest"]["launches"] = ptx.launches
    return Executable(native, rebuild, stats, dumps, device=device, info=info)
