"""The `graphc` command: dump, viz, info, run, profile, compile, import and bench.

PATH is an artifact (.gcx), an ONNX model (.onnx) or `file.py:attribute`, where the
attribute is an Executable, outputs to compile (a Tensor, list or dict), or a function
returning either.
"""
from __future__ import annotations

import argparse
import json
import os
import runpy
import shutil
import subprocess
import sys
import tempfile

import numpy as np

from graphc_runtime.artifact import MAGIC
from graphc_runtime.errors import GraphcError

STAGES = ("graph", "optimized", "fused", "memory", "llvm", "asm")


class CliError(Exception):
    """A usage problem reported as `graphc: error: ...` with exit code 2."""


def _is_artifact(path: str) -> bool:
    if not os.path.isfile(path):
        return False
    with open(path, "rb") as f:
        return f.read(len(MAGIC)) == MAGIC or path.endswith(".gcx")


def _is_onnx(path: str) -> bool:
    return path.endswith(".onnx") and os.path.isfile(path)


def _onnx_target(path: str, input_shapes=None, **compile_options):
    """Executable for an ONNX model file."""
    from . import onnx as gonnx
    return gonnx.compile(path, input_shapes=input_shapes or None, **compile_options)


def _shapes(items) -> dict:
    """--input-shape NAME=1,3,224,224 options as {name: shape}."""
    shapes = {}
    for item in items or []:
        name, sep, dims = item.partition("=")
        try:
            if not sep:
                raise ValueError
            shapes[name] = tuple(int(d) for d in dims.split(",") if d.strip())
        except ValueError:
            raise CliError(f"--input-shape wants NAME=D0,D1,..., got {item!r}") from None
    return shapes


def _sizes(items) -> dict:
    """--size NAME=N options as {name: N} (N >= 1)."""
    sizes = {}
    for item in items or []:
        name, sep, value = item.partition("=")
        if not sep or not value.strip().isdigit() or int(value) < 1 or not name:
            raise CliError(f"--size wants NAME=N with N >= 1, got {item!r}")
        sizes[name] = int(value)
    return sizes


def _python_target(spec: str, **compile_options):
    """Executable for `file.py:attribute`."""
    if _is_onnx(spec):
        return _onnx_target(spec, **compile_options)
    if ":" not in spec:
        raise CliError(f"{spec!r} is neither an artifact, an .onnx model nor "
                       f"file.py:attribute")
    filename, attr = spec.rsplit(":", 1)
    if not os.path.isfile(filename):
        raise CliError(f"no such file: {filename}")
    sys.path.insert(0, os.path.dirname(os.path.abspath(filename)))
    try:
        namespace = runpy.run_path(filename, run_name="graphc_target")
    finally:
        sys.path.pop(0)
    if attr not in namespace:
        raise CliError(f"{filename} has no attribute {attr!r}")
    import graphc as gc
    obj = namespace[attr]
    if callable(obj) and not isinstance(obj, gc.Executable):
        obj = obj()
    if isinstance(obj, gc.Executable):
        if compile_options:
            raise CliError("--pass needs outputs to compile, not an already compiled Executable")
        return obj
    return gc.compile(obj, **compile_options)


class Target:
    """An artifact or a compiled Python target, seen through one interface."""

    def __init__(self, path: str, key=None, **compile_options):
        self.path = path
        if _is_artifact(path):
            import graphc_runtime
            self.model = graphc_runtime.load(path, key=key)
            self.exe = None
        else:
            self.exe = _python_target(path, **compile_options)
            self.model = None

    def dump(self, stage: str) -> str:
        return (self.model or self.exe).dump(stage)

    def page(self) -> str:
        """The interactive viewer page (graphc.viewer)."""
        from . import viewer
        if self.model is not None:
            return viewer.model_page(self.model)
        return viewer.executable_page(self.exe)

    def parts(self):
        """(graph JSON, fusion dict, memory dict, manifest-like info)."""
        if self.model is not None:
            m = self.model
            return m.graph_json(), m.fusion_plan(), m.manifest.get("memory", {}), m.manifest
        info = self.exe._info
        manifest = self.exe.manifest()
        return (info["sections"]["graph.json"].decode(),
                json.loads(info["sections"]["fusion.json"].decode()), manifest["memory"],
                manifest)


def cmd_dump(args) -> int:
    if args.pass_name:
        if _is_artifact(args.path):
            raise CliError("--pass works on file.py:attribute targets (an artifact holds "
                           "the final program only)")
        with tempfile.TemporaryDirectory() as d:
            Target(args.path, dump_dir=d)
            files = sorted(os.listdir(d))
            match = [f for f in files if f.split("-", 1)[1][:-4] == args.pass_name]
            if not match:
                names = ", ".join(f.split("-", 1)[1][:-4] for f in files)
                raise CliError(f"no pass named {args.pass_name!r}; passes: {names}")
            with open(os.path.join(d, match[0])) as f:
                sys.stdout.write(f.read())
        return 0
    sys.stdout.write(Target(args.path, key=_key(args)).dump(args.stage).rstrip("\n") + "\n")
    return 0


def cmd_viz(args) -> int:
    from . import viz
    target = Target(args.path, key=_key(args))
    graph_json, fusion, memory, manifest = target.parts()
    out = args.output
    ext = os.path.splitext(out)[1].lower()
    if args.memory:
        if ext not in (".svg", ".png"):
            raise CliError(f"--memory writes .svg or .png, not {ext or 'no extension'}")
        sizes = _sizes(args.size)
        try:
            if ext == ".svg":
                _write(out, viz.memory_svg(memory, sizes))
            else:
                viz.memory_png(memory, out, sizes)
        except (RuntimeError, ValueError) as e:
            raise CliError(str(e)) from None
        print(f"wrote {out}")
        return 0
    view = viz.ProgramView(graph_json, fusion, memory, manifest.get("graph_name", "graph"))
    if ext == ".dot":
        _write(out, viz.to_dot(view))
    elif ext == ".html":
        _write(out, target.page())
    elif ext in (".svg", ".png"):
        dot = shutil.which("dot")
        if dot is None:
            raise CliError(f"drawing {ext} needs Graphviz's `dot` program (Debian package "
                           f"graphviz); write .dot or .html instead")
        result = subprocess.run([dot, f"-T{ext[1:]}", "-o", out], input=viz.to_dot(view),
                                text=True, capture_output=True)
        if result.returncode:
            raise CliError(f"dot failed: {result.stderr.strip()}")
    else:
        raise CliError(f"unknown output format {ext or '(none)'}; use .dot, .svg, .png or .html")
    print(f"wrote {out}")
    return 0


def _write(path, text):
    with open(path, "w") as f:
        f.write(text)


def _key(args):
    """The signing key's bytes from --key FILE (None without it)."""
    path = getattr(args, "key", None)
    if path is None:
        return None
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise CliError(f"cannot read the key file {path}: {e.strerror}") from None


def cmd_info(args) -> int:
    key = _key(args)
    _, fusion, memory, manifest = Target(args.path, key=key).parts()
    sig = manifest["signature"]
    lines = [f"graph: {manifest.get('graph_name', '?')}",
             "signed: " + ("no" if not manifest.get("signed") else
                           "yes, verified with the key" if key else
                           "yes (no key given to verify it)"),
             f"target: {manifest['target'].get('triple')} ({manifest['target'].get('cpu')})",
             f"graphc version: {manifest.get('graphc_version')}", "inputs:"]
    lines += [f"  {n}: {d}{_shape_text(s)}" for n, s, d in sig["inputs"]] or ["  (none)"]
    lines.append("outputs:")
    lines += [f"  {n}: {d}{_shape_text(s)}" for n, s, d in sig["outputs"]] or ["  (none)"]
    lines.append("variables:")
    lines += [f"  {n}: {d}{_shape_text(s)}" for n, s, d in sig["variables"]] or ["  (none)"]
    if sig.get("symbols"):
        lines.append("symbolic dimensions (any size >= 1 at the call):")
        for name in sig["symbols"]:
            uses = [f"{n}[{axis}]" for n, s, _ in sig["inputs"]
                    for axis, d in enumerate(s) if str(d) == name]
            lines.append(f"  {name}: from {', '.join(uses) or '?'}")
    lines.append(f"kernels: {len(manifest.get('kernels', []))}")
    lines.append(f"arena bytes: {manifest['arena_bytes']} (live lower bound "
                 f"{memory.get('live_bytes_lower_bound')}, naive {memory.get('naive_bytes')})")
    print("\n".join(lines))
    return 0


def _shape_text(shape) -> str:
    return "[" + ", ".join(map(str, shape)) + "]"


def _feeds(items) -> dict:
    feeds = {}
    for item in items or []:
        if "=" not in item:
            raise CliError(f"--input takes name=file.npy, got {item!r}")
        name, filename = item.split("=", 1)
        try:
            feeds[name] = np.load(filename, allow_pickle=False)
        except (OSError, ValueError) as e:
            raise CliError(f"cannot read {filename}: {e}") from None
    return feeds


def cmd_profile(args) -> int:
    import graphc_runtime
    model = graphc_runtime.load(args.artifact, key=_key(args))
    report = model.profile(args.repeat, **_feeds(args.input))
    print(report.table())
    if args.output:
        report.save_trace(args.output)
        print(f"wrote {args.output} ({len(report.events)} trace events; open it in Perfetto "
              f"or chrome://tracing)")
    return 0


def cmd_run(args) -> int:
    import graphc_runtime
    model = graphc_runtime.load(args.artifact, key=_key(args))
    feeds = _feeds(args.input)
    result = model(**feeds)
    flat = _flatten(result)
    if args.output_dir:
        os.makedirs(args.output_dir, exist_ok=True)
        for name, value in flat:
            path = os.path.join(args.output_dir, f"{name}.npy")
            np.save(path, value)
            print(f"wrote {path} {value.dtype}{list(value.shape)}")
    else:
        for name, value in flat:
            with np.printoptions(threshold=20, edgeitems=3):
                print(f"{name}: {value.dtype}{list(value.shape)}\n{value}")
    return 0


def _flatten(result, prefix="out"):
    if isinstance(result, np.ndarray):
        return [(prefix, result)]
    if isinstance(result, dict):
        return [item for k, v in result.items() for item in _flatten(v, str(k))]
    return [item for k, v in enumerate(result) for item in _flatten(v, f"{prefix}{k}")]


def cmd_compile(args) -> int:
    exe = _python_target(args.target)
    exe.save(args.output, key=_key(args))
    print(f"wrote {args.output} ({exe.stats['kernels']} kernels, arena "
          f"{exe.stats['arena_bytes']} bytes)")
    return 0


def cmd_import(args) -> int:
    if not os.path.isfile(args.model):
        raise CliError(f"no such file: {args.model}")
    exe = _onnx_target(args.model, input_shapes=_shapes(args.input_shape))
    exe.save(args.output, key=_key(args))
    sig = exe.manifest()["signature"]
    print(f"wrote {args.output}: inputs "
          f"{', '.join(f'{n} {d}{_shape_text(s)}' for n, s, d in sig['inputs'])}; "
          f"{exe.stats['kernels']} kernels, "
          f"arena {exe.stats['arena_bytes']} bytes")
    narrow = getattr(exe, "onnx_dtypes", None)
    if narrow:
        print("the artifact holds these ONNX integer types widened (feed and read them so): "
              + ", ".join(f"{n} {d} as {'int64' if d.itemsize == 4 else 'int32'}"
                          for n, d in narrow.items()))
    return 0


def cmd_bench(args) -> int:
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if not os.path.isfile(os.path.join(here, "bench", "__main__.py")):
        raise CliError("the benchmarks live in the source checkout's bench/ folder, which "
                       "this installation does not have")
    return subprocess.call([sys.executable, "-m", "bench"] + list(args.rest), cwd=here)


def _key_option(parser, what: str) -> None:
    parser.add_argument("--key", metavar="FILE", help=f"{what} the key in FILE (HMAC-SHA256)")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="graphc", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    d = sub.add_parser("dump", help="print a graph or artifact at a stage")
    d.add_argument("path", help="artifact (.gcx) or file.py:attribute")
    d.add_argument("--stage", choices=STAGES, default="optimized")
    d.add_argument("--pass", dest="pass_name", help="print the graph after this pass")
    _key_option(d, "verify the artifact's signature with")
    d.set_defaults(fn=cmd_dump)
    v = sub.add_parser("viz", help="draw the fused graph or the memory plan")
    v.add_argument("path")
    v.add_argument("-o", "--output", required=True, help="out.dot, .svg, .png or .html")
    v.add_argument("--memory", action="store_true", help="draw the memory plan instead")
    v.add_argument("--size", action="append", metavar="NAME=N",
                   help="draw a symbolic size at N (default: a typical 64; repeatable)")
    _key_option(v, "verify the artifact's signature with")
    v.set_defaults(fn=cmd_viz)
    i = sub.add_parser("info", help="signature, kernels, arena size and target")
    i.add_argument("path")
    _key_option(i, "verify the artifact's signature with")
    i.set_defaults(fn=cmd_info)
    r = sub.add_parser("run", help="run an artifact on .npy inputs")
    r.add_argument("artifact")
    r.add_argument("--input", action="append", metavar="NAME=FILE.npy")
    r.add_argument("--output-dir", help="write each output as NAME.npy here")
    _key_option(r, "verify the artifact's signature with")
    r.set_defaults(fn=cmd_run)
    pr = sub.add_parser("profile", help="time each kernel of an artifact; Chrome trace")
    pr.add_argument("artifact")
    pr.add_argument("--input", action="append", metavar="NAME=FILE.npy")
    pr.add_argument("--repeat", type=int, default=10, help="profiled calls (default 10)")
    pr.add_argument("-o", "--output", help="write a Chrome trace-event file (trace.json)")
    _key_option(pr, "verify the artifact's signature with")
    pr.set_defaults(fn=cmd_profile)
    c = sub.add_parser("compile", help="compile file.py:function into an artifact")
    c.add_argument("target", help="file.py:function (returns outputs or an Executable)")
    c.add_argument("-o", "--output", required=True)
    _key_option(c, "sign the artifact with")
    c.set_defaults(fn=cmd_compile)
    im = sub.add_parser("import", help="compile an ONNX model into an artifact")
    im.add_argument("model", help="model.onnx")
    im.add_argument("-o", "--output", required=True, help="model.gcx")
    im.add_argument("--input-shape", action="append", metavar="NAME=D0,D1,...",
                    help="size of an input with symbolic dims (repeatable)")
    _key_option(im, "sign the artifact with")
    im.set_defaults(fn=cmd_import)

    b = sub.add_parser("bench", help="run the benchmarks (source checkout)")
    b.add_argument("rest", nargs=argparse.REMAINDER)
    b.set_defaults(fn=cmd_bench)
    return p


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.fn(args)
    except CliError as e:
        print(f"graphc: error: {e}", file=sys.stderr)
        return 2
    except GraphcError as e:
        print(f"graphc: {type(e).__name__}: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
