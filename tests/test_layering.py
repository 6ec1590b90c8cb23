"""The architecture's layering, checked on the source: no import cycles between modules
(counting imports inside functions too), no pass imports a backend, and the runtime never
imports the compiler."""
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


def test_passes_do_not_import_backends_and_the_runtime_not_the_compiler():
    g = import_graph()
    for mod in g:
        for dep in g.successors(mod):
            if mod.startswith("graphc.passes"):
                assert not dep.startswith("graphc.codegen"), f"{mod} imports {dep}"
            if mod.startswith("graphc.kernels"):
                assert not dep.startswith("graphc.codegen"), f"{mod} imports {dep}"
            if mod.startswith("graphc_runtime"):
                assert not dep.startswith("graphc."), f"{mod} imports {dep}"
