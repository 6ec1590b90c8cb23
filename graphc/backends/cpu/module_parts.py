"""A program's LLVM IR cut into parts that compile on their own, one object file each,
so that LLVM's work on a large program runs in several processes at once
(llvm_workers.py); the runtime loads the objects into one engine, which resolves their
calls to each other by name.

Part 0 keeps the program's roots (graphc_main, graphc_entry, the segments), every other
global that is not an internal constant, and the kernels too small to be worth a call
(LLVM inlines those into the segments as in a whole-module build). The larger kernels,
each with the helpers only it reaches (thread trampolines, chained followers), are
dealt to the other parts, largest first, each to the part with the least so far. A
function called from another part than its own loses its internal linkage; internal
constants are copied into every part; the other globals are declared `external` outside
part 0. The text is graphc's own (llvmlite.ir's printer): anything this reader does not
recognize makes `split` return None and the program compiles as one module.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

REF = re.compile(r'@"([^"]+)"')
GLOBAL = re.compile(r'@"([^"]+)" = ((?:(?:internal|private|external|dso_local|'
                    r'unnamed_addr|local_unnamed_addr|hidden) )*)(global|constant) (.*)$')
PARAM_NAME = re.compile(r' %"[^"]*"')
HEADER = ("; ModuleID", "target ", "source_filename", "!")

SPLIT_MIN_LINES = 2000       # a smaller program compiles as one module
KERNEL_MIN_LINES = 60        # a smaller kernel stays in part 0 (inlined into its segment)
PART_LINES = 2500            # about this much code per part of kernels
MIN_PARTS = 2                # kernel parts at least (two processes share even the smallest)


@dataclass
class Item:
    kind: str                # "define", "global", "declare" or "other"
    name: str | None
    text: str


def items(text: str) -> "list[Item] | None":
    """The module's top-level items in order; None where a line is not understood."""
    out, lines, i = [], text.split("\n"), 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("define "):
            j = i
            while j < len(lines) and lines[j] != "}":
                j += 1
            m = REF.search(line)
            if j == len(lines) or m is None:
                return None
            out.append(Item("define", m.group(1), "\n".join(lines[i:j + 1])))
            i = j + 1
            continue
        if line.startswith("@"):
            m = GLOBAL.match(line)
            if m is None:
                return None
            out.append(Item("global", m.group(1), line))
        elif line.startswith("declare "):
            out.append(Item("declare", REF.search(line).group(1), line))
        elif line.strip() == "" or line.startswith(HEADER):
            out.append(Item("other", None, line))
        else:
            return None
        i += 1
    return out


def declaration(define: str) -> str:
    """`declare` text for a function defined by `define` (its first line)."""
    head = define.split("\n", 1)[0]
    close = _closing_paren(head, head.index('"('))
    proto = PARAM_NAME.sub("", head[:close + 1])
    return "declare " + proto[len("define "):].replace("internal ", "", 1)


def global_declaration(line: str) -> str:
    """`external` declaration of a global defined by `line` (same type, no value)."""
    name, _, kind, rest = GLOBAL.match(line).groups()
    return f'@"{name}" = external {kind} {_leading_type(rest)}'


def internal_constant(line: str) -> bool:
    _, linkage, kind, _ = GLOBAL.match(line).groups()
    return kind == "constant" and "internal" in linkage.split()


def split(text: str) -> "list[str] | None":
    """The parts' texts (part 0 first), or None: too small to pay, or not understood."""
    if text.count("\n") < SPLIT_MIN_LINES:
        return None
    its = items(text)
    if its is None:
        return None
    defines = {it.name: it.text for it in its if it.kind == "define"}
    refs = {name: set(REF.findall(body.split("\n", 1)[1])) & defines.keys()
            for name, body in defines.items()}
    in_globals = {n for it in its if it.kind == "global" for n in REF.findall(it.text)}
    pinned = in_globals & defines.keys()             # stay in part 0, callable from all
    roots = pinned | {n for n, body in defines.items()
                      if not body.startswith("define internal ")}
    home = {n: 0 for n in defines}
    groups = _kernel_groups(defines, refs, roots)
    sizes = {g: sum(defines[n].count("\n") for n in members) for g, members in groups.items()}
    movable = sorted((g for g in groups if sizes[g] >= KERNEL_MIN_LINES),
                     key=lambda g: (-sizes[g], g))
    n_parts = min(len(movable), max(MIN_PARTS, round(sum(sizes[g] for g in movable) /
                                                     PART_LINES)))
    if n_parts < 1:
        return None
    load = [0] * n_parts
    for g in movable:
        k = load.index(min(load))
        load[k] += sizes[g]
        for n in groups[g]:
            home[n] = k + 1
    crossing = pinned | {callee for caller, callees in refs.items() for callee in callees
                         if home[callee] != home[caller]}
    return [_part(its, home, crossing, p) for p in range(n_parts + 1)]


def _kernel_groups(defines: dict, refs: dict, roots: set) -> dict:
    """Internal functions joined with those they call or are called by (roots aside):
    {representative: [names]}."""
    parent = {n: n for n in defines if n not in roots}

    def find(n):
        while parent[n] != n:
            parent[n] = parent[parent[n]]
            n = parent[n]
        return n
    for caller, callees in refs.items():
        if caller in roots:
            continue
        for callee in callees:
            if callee not in roots:
                parent[find(callee)] = find(caller)
    groups: dict = {}
    for n in parent:
        groups.setdefault(find(n), []).append(n)
    return groups


def _part(its: list, home: dict, crossing: set, p: int) -> str:
    out = []
    for it in its:
        if it.kind == "define":
            if home[it.name] != p:
                out.append(declaration(it.text))
            elif it.name in crossing:
                out.append(it.text.replace("define internal ", "define ", 1))
            else:
                out.append(it.text)
        elif it.kind == "global" and not internal_constant(it.text):    # part 0's
            out.append(it.text.replace(" = internal ", " = ", 1) if p == 0
                       else global_declaration(it.text))
        else:
            out.append(it.text)
    return "\n".join(out)


def _closing_paren(text: str, start: int) -> int:
    depth = 0
    for k in range(start, len(text)):
        depth += {"(": 1, ")": -1}.get(text[k], 0)
        if text[k] == ")" and depth == 0:
            return k
    raise ValueError(f"unbalanced parentheses in {text!r}")


def _leading_type(text: str) -> str:
    """The LLVM type at the start of `text` (a global's `type value`)."""
    pairs = {"[": "]", "{": "}", "<": ">"}
    k = 0
    if text[0] in pairs:
        depth = 0
        for k, ch in enumerate(text):
            depth += (ch in pairs) - (ch in pairs.values())
            if depth == 0:
                break
        k += 1
    else:
        while k < len(text) and text[k] not in " ,":
            k += 1
    while k < len(text) and text[k] == "*":
        k += 1
    return text[:k]
