"""Registries are consumed, never restated (issue 24, item 6): no consumer compares a value with a
schedule's or a collective algorithm's name to decide what to do; it asks the registry's entry
(`SCHEDULE_SPECS[name].virtual_stages`, `.by_times`, `simulator.cost.comm.ALGOS`)."""

import ast
from pathlib import Path

from simulator import SCHEDULES
from simulator.cost.comm import ALGOS

REPO = Path(__file__).resolve().parents[1]
HOMES = {"simulator/parallel/schedule_registry.py", "simulator/parallel/schedules.py",
         "simulator/collectives/algorithms.py", "simulator/collectives/trees.py", "simulator/cost/comm.py"}
# left, each with its reason (owned by other work of issue 24; listed here so none is added silently)
KNOWN = {
    "simulator/parallel/replicated.py": "dualpipe's bidirectional placement (schedule owner)",
    "simulator/cost/search_space.py": "one stage: every schedule is the same, 1F1B is the one priced",
    "simulator/cost/memory_report.py": "the last stage's in-flight micro-batches (the registry has stage 0's only)",
    "simulator/auto/pipeline/compile.py": "MindSpore's pipeline_scheduler option names gpipe / 1f1b",
    "app/views/pipelines.py": "1F1B is the page's baseline for the differences it prints",
    "app/views/context.py": "'ring' here is the context-parallel attention the page draws, not a collective",
}
NAMES = set(SCHEDULES) | set(ALGOS)


def _name_comparisons(path: Path) -> list[int]:
    """Lines comparing something with a schedule or algorithm name (==, !=, in a literal tuple)."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.Compare):
            continue
        for side in (node.left, *node.comparators):
            consts = side.elts if isinstance(side, (ast.Tuple, ast.List, ast.Set)) else [side]
            if any(isinstance(c, ast.Constant) and c.value in NAMES for c in consts):
                lines.append(node.lineno)
    return lines


def test_no_consumer_dispatches_on_a_schedule_or_algorithm_name():
    files = sorted((REPO / "simulator").rglob("*.py")) + sorted((REPO / "app").rglob("*.py"))
    found = {str(p.relative_to(REPO)): lines for p in files
             if str(p.relative_to(REPO)) not in HOMES and (lines := _name_comparisons(p))}
    assert set(found) <= set(KNOWN), {k: v for k, v in found.items() if k not in KNOWN}
