"""Imports point down the layers of docs/ARCHITECTURE.md: a module may import only its own layer or
lower ones (lazy imports inside functions count too). `ray` only in simulator/runtime/, `streamlit`
never in simulator/."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "simulator"

# lowest first
LAYERS = [
    {"units", "errors", "trace"},
    {"mesh", "topology"},
    {"layout", "layout_convert"},
    {"collectives"},
    {"program", "ops"},
    {"models"},
    {"runtime"},  # a thin executor of programs: it needs only program, ops and collectives
    {"parallel"},
    {"cost"},
    {"auto"},
    {"training", "calibrate", "faults", "viz", "grading", "sweep"},
    {"commands", "cli", "__main__", "__init__"},
]


def layer_of(part: str) -> int:
    key = part[:-3] if part.endswith(".py") else part
    if key.startswith("viz"):
        key = "viz"
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
            there = layer_of(mod[1] if not mod[1].startswith("viz") else "viz")
            if there > here:
                bad.append(f"{'/'.join(rel)} (layer {here}) imports {'.'.join(mod)} (layer {there})")
    assert not bad, "imports pointing up:\n" + "\n".join(bad)
