"""Imports point down the layers of docs/ARCHITECTURE.md: a module may import only its own layer or
lower ones (lazy imports inside functions count too). `ray` only in simulator/runtime/, `streamlit`
never in simulator/."""

import ast
import re
import shutil
from pathlib import Path

from layering_graph import cycles, graph, private_imports

ROOT = Path(__file__).resolve().parents[1] / "simulator"

DOC = ROOT.parent / "docs" / "ARCHITECTURE.md"


def documented_layers(doc: Path = DOC) -> list[set[str]]:
    """The layer table of docs/ARCHITECTURE.md ("| 0 | `units`, `errors` | ... |"), lowest first."""
    text = doc.read_text(encoding="utf-8").split("## Layers", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| (\d+) \| ([^|]*) \|", text, re.M)
    assert [int(n) for n, _ in rows] == list(range(len(rows))), "layers must be numbered 0, 1, 2, ..."
    return [set(re.findall(r"`([\w.]+)`", names)) for _, names in rows]


LAYERS = documented_layers()   # the documented order is the enforced one


def test_every_documented_module_exists_and_every_module_is_documented():
    documented = set().union(*LAYERS)
    present = {p.stem if p.is_file() else p.name for p in ROOT.iterdir()
               if (p.suffix == ".py") or (p.is_dir() and (p / "__init__.py").is_file())}
    assert documented == present, (f"in docs/ARCHITECTURE.md but not in simulator/: {sorted(documented - present)}; "
                                   f"in simulator/ but not in the doc: {sorted(present - documented)}")


def layer_of(part: str) -> int:
    key = part[:-3] if part.endswith(".py") else part
    for i, names in enumerate(LAYERS):
        if key in names:
            return i
    raise AssertionError(f"simulator/{part} is not placed in a layer: add it to LAYERS")


def imported_simulator_modules(path: Path):
    tree = ast.parse(path.read_text())
    pkg = path.relative_to(ROOT.parent).with_suffix("").parts[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(pkg[: len(pkg) - node.level + 1])
                mod = base + (node.module.split(".") if node.module else [])
                names = [mod + [a.name] for a in node.names] if not node.module else [mod]
            elif node.module and node.module.split(".")[0] in ("simulator", "ray", "streamlit"):
                names = [node.module.split(".")]
            else:
                continue
            yield from names
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] in ("simulator", "ray", "streamlit"):
                    yield a.name.split(".")


def test_imports_point_down():
    bad = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).parts
        here = layer_of(rel[0])
        for mod in imported_simulator_modules(path):
            if mod[0] == "ray":
                if rel[0] != "runtime":
                    bad.append(f"{'/'.join(rel)} imports ray")
                continue
            if mod[0] == "streamlit":
                bad.append(f"{'/'.join(rel)} imports streamlit")
                continue
            if len(mod) < 2:
                continue
            there = layer_of(mod[1])
            if there > here:
                bad.append(f"{'/'.join(rel)} (layer {here}) imports {'.'.join(mod)} (layer {there})")
    assert not bad, "imports pointing up:\n" + "\n".join(bad)


# Known cycles, each with its reason; the test fails when one disappears (remove it here) or a new
# one appears. None today.
KNOWN_CYCLES: list[list[str]] = []


def test_no_import_cycles_even_inside_functions():
    found = cycles(graph(ROOT))
    new = [c for c in found if c not in KNOWN_CYCLES]
    assert not new, "import cycles (every import statement counts, lazy ones too):\n" + "\n".join(
        " <-> ".join(c) for c in new)
    gone = [c for c in KNOWN_CYCLES if c not in found]
    assert not gone, f"these cycles are gone: remove them from KNOWN_CYCLES: {gone}"


def test_no_private_names_imported_across_modules():
    bad = private_imports(ROOT)
    assert not bad, "private names imported from another module (make them public or move them):\n" + "\n".join(bad)


def test_a_cycle_hidden_in_a_function_is_caught(tmp_path):
    """Plant a cycle, made only of imports inside functions, in a scratch copy of simulator/."""
    copy = tmp_path / "simulator"
    shutil.copytree(ROOT, copy, ignore=shutil.ignore_patterns("__pycache__"))
    assert cycles(graph(copy)) == KNOWN_CYCLES
    with open(copy / "errors.py", "a") as f:  # program.py imports errors.py at module level
        f.write("\n\ndef _planted():\n    from .program import Program\n    return Program\n")
    found = [c for c in cycles(graph(copy)) if c not in KNOWN_CYCLES]
    assert any({"simulator.errors", "simulator.program"} <= set(c) for c in found), found
    with open(copy / "mesh.py", "a") as f:
        f.write("\n\ndef _planted():\n    from .topology import _hidden\n    return _hidden\n")
    assert any(b.startswith("simulator/mesh.py:") and "_hidden" in b for b in private_imports(copy))


def test_docstrings_come_first():
    """A class or function whose docstring sits after an attribute has __doc__ None."""
    bad = []
    for path in sorted(ROOT.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
                strings = [isinstance(x, ast.Expr) and isinstance(x.value, ast.Constant)
                           and isinstance(x.value.value, str) for x in node.body[:3]]
                if not strings[0] and any(strings[1:]):
                    bad.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}")
    assert not bad, "docstring after the first statement:\n" + "\n".join(bad)
