"""The import graph of a copy of simulator/, read from the source (nothing is imported).

Every import statement counts, at module level or inside a function, class or `if TYPE_CHECKING`
block: a cycle hidden by a lazy import is still a cycle. Used by tests/test_layering.py.
"""

from __future__ import annotations

import ast
from pathlib import Path


def module_name(root: Path, path: Path) -> str:
    """simulator/cost/clock.py -> simulator.cost.clock; simulator/viz/__init__.py -> simulator.viz."""
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules(root: Path) -> dict[str, Path]:
    return {module_name(root, p): p for p in sorted(root.rglob("*.py"))}


def _package_of(name: str, path: Path) -> list[str]:
    parts = name.split(".")
    return parts if path.name == "__init__.py" else parts[:-1]


def imports(name: str, path: Path, known: dict[str, Path]):
    """(line, imported module, names imported from it) for every import of a simulator module."""
    top = name.split(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == top:
                    yield node.lineno, a.name, ()
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                pkg = _package_of(name, path)
                base = pkg[: len(pkg) - node.level + 1]
                mod = ".".join(base + (node.module.split(".") if node.module else []))
            elif node.module and node.module.split(".")[0] == top:
                mod = node.module
            else:
                continue
            plain = []
            for a in node.names:  # `from pkg import submodule` imports the submodule
                if f"{mod}.{a.name}" in known:
                    yield node.lineno, f"{mod}.{a.name}", ()
                else:
                    plain.append(a.name)
            if plain or not node.names:
                yield node.lineno, mod, tuple(plain)


def graph(root: Path) -> dict[str, set[str]]:
    known = modules(root)
    return {name: {mod for _, mod, _ in imports(name, path, known) if mod in known and mod != name}
            for name, path in known.items()}


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:  # recursion depth is bounded by the module count (~200)
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(g.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return sorted(out)


def private_imports(root: Path) -> list[str]:
    """`from module import _name` where module is another simulator module."""
    known = modules(root)
    bad = []
    for name, path in known.items():
        for line, mod, names in imports(name, path, known):
            for n in names:
                if n.startswith("_") and not n.startswith("__") and mod != name:
                    bad.append(f"{path.relative_to(root.parent)}:{line} imports {n} from {mod}")
    return bad
