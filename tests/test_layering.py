"""The architecture's layering, checked on the source: no import cycles between modules
(counting imports inside functions too), and the package order
runtime < IR < graph passes < kernel IR < scheduling < backends < API: a module imports
only modules of its own layer or of layers below (the runtime none of graphc's)."""
import ast
import os

import networkx as nx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = {"graphc": os.path.join(ROOT, "graphc"), "graphc_runtime": os.path.join(ROOT, "runtime")}


def modules():
    """module name -> path for every .py file of graphc and graphc_runtime."""
    out = {}
    for package, folder in PACKAGES.items():
        for dirpath, _, files in os.walk(folder):
            for f in files:
                if f.endswith(".py"):
                    rel = os.path.relpath(os.path.join(dirpath, f), folder)[:-3].split(os.sep)
                    if rel[-1] == "__init__":
                        rel = rel[:-1]
                    out[".".join([package] + rel)] = os.path.join(dirpath, f)
    return out


def _runtime_imports(tree):
    """Import statements that can run (at module level or inside functions), leaving out
    `if TYPE_CHECKING:` blocks, which only type checkers read."""
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            node.body = []
    return [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]


def import_graph() -> nx.DiGraph:
    mods = modules()
    g = nx.DiGraph()
    for name, path in mods.items():
        is_package = path.endswith("__init__.py")
        base = name.split(".") if is_package else name.split(".")[:-1]
        g.add_node(name)
        for node in _runtime_imports(ast.parse(open(path).read())):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    prefix = ".".join(base[:len(base) - node.level + 1])
                    mod = f"{prefix}.{node.module}" if node.module else prefix
                else:
                    mod = node.module
                targets = [f"{mod}.{a.name}" if f"{mod}.{a.name}" in mods else mod
                           for a in node.names]
            for t in targets:
                while t and t not in mods:
                    t = t.rpartition(".")[0]
                # importing a package's submodule runs the package's __init__ first, but
                # that edge is not a cycle of the modules' own code: skip parent packages
                if t and t != name and not name.startswith(t + "."):
                    g.add_edge(name, t)
    return g


def test_no_import_cycles():
    cycles = sorted(sorted(c) for c in nx.simple_cycles(import_graph()))
    assert cycles == [], "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles[:10])


# the layers, lowest first; every other graphc module is the API (tensor, functions, nn,
# optim, autodiff, control flow, the compile driver, onnx, the CLI and viewer)
LAYERS = ["graphc_runtime", "graphc.ir", "graphc.passes", "graphc.kernels",
          "graphc.schedule", "graphc.backends"]


def layer(module: str) -> int:
    for rank, prefix in enumerate(LAYERS):
        if module == prefix or module.startswith(prefix + "."):
            return rank
    return len(LAYERS)


def test_every_module_imports_only_its_layer_or_those_below():
    g = import_graph()
    wrong = [f"{mod} ({LAYERS[layer(mod)] if layer(mod) < len(LAYERS) else 'API'}) imports "
             f"{dep}" for mod, dep in g.edges() if layer(dep) > layer(mod) and dep != "graphc"]
    assert wrong == [], "\n".join(wrong)
    # loop and branch bodies are compiled by the driver's compiler, handed down: nothing
    # in scheduling runs the pass pipeline itself
    for mod in g:
        if mod.startswith("graphc.schedule"):
            assert not any(d in ("graphc.passes.pipeline", "graphc.passes.manager")
                           for d in g.successors(mod)), mod


def test_backends_share_llvm_and_never_import_each_other():
    """The CPU and CUDA backends build on backends/llvm (emitter, module, values) and
    neither imports the other."""
    g = import_graph()
    for mod, dep in g.edges():
        if mod.startswith("graphc.backends.llvm"):
            assert not dep.startswith(("graphc.backends.cpu", "graphc.backends.cuda")), \
                f"{mod} imports {dep}"
        if mod.startswith("graphc.backends.cpu"):
            assert not dep.startswith("graphc.backends.cuda"), f"{mod} imports {dep}"
        if mod.startswith("graphc.backends.cuda"):
            assert not dep.startswith("graphc.backends.cpu"), f"{mod} imports {dep}"


def test_no_device_names_compared_outside_the_backends():
    """A device kind ('cpu', 'cuda') is a backend's business: no graph pass, kernel IR or
    scheduling module, nor the driver, compares one."""
    import re
    pattern = re.compile(r"""(==|!=|\bin)\s*\(?\s*["'](cpu|cuda)["']|["'](cpu|cuda)["']\s*(==|!=)""")
    offenders = []
    for name, path in modules().items():
        if layer(name) in (2, 3, 4) or name == "graphc.compiler":
            for k, line in enumerate(open(path), 1):
                if pattern.search(line) or "annotations.get(\"device\"" in line:
                    offenders.append(f"{name}:{k}: {line.strip()}")
    assert offenders == [], "\n".join(offenders)


def test_no_source_file_is_over_500_lines():
    """Small modules, one concept each: a file past 500 lines is split by concern."""
    long = {name: n for name, path in modules().items()
            if (n := sum(1 for _ in open(path, encoding="utf-8"))) > 500}
    assert long == {}, long
