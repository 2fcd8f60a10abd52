"""Every lesson states numbers its code prints: each number a README's worked example quotes in
the comment of a `print(...)` line is among the numbers that example prints when it runs (at the
precision quoted: 0.273 matches 0.2727...; "~1e-16" an order of magnitude; "< 1e-9" a bound). A
number inside arithmetic (3*(1+2), (p-1)/p, 2*3/4*64) is a derivation, not a quote, and is skipped.
Where a lesson states a pipeline bubble it names both definitions: (p-1)/(m+p-1) of the step, as
parasim measures it, and (p-1)/m of the ideal compute, the Ultra-Scale Playbook's."""

import math
import re
import subprocess
import sys

import pytest

from simulator.grading import list_lessons

LESSONS = [x for x in list_lessons() if not x.missing]
_NUM = r"(?:\d{1,3}(?:,\d{3})+(?![\d])|\d+)(?:\.\d+)?(?:e[-+]?\d+)?"   # 1,088 and 0.273 and 1e-16
NUMBER = re.compile(r"(?<![\w.*/+^-])(~|<=?\s*|>=?\s*)?(" + _NUM + r")(?![\w*/^(]|\s*[*/+^]\s*[\d(p])")
PRINTED = re.compile(_NUM)


def quoted(readme: str) -> list[tuple[str, str]]:
    """(the print line, a number its comment quotes) for every python block of `readme`."""
    out = []
    for block in re.findall(r"```python\n(.*?)```", readme, re.S):
        for line in block.splitlines():
            code, _, comment = line.partition("#")
            if "print(" not in code or not comment:
                continue
            for prefix, text in NUMBER.findall(re.sub(r"\([^()]*[-+*/][^()]*\)", " ", comment)):
                out.append((line.strip(), (prefix or "").strip() + text))
    return out


def printed(text: str, numbers: list[float]) -> bool:
    """Is the quoted `text` ("0.273", "~1e-16", "< 1e-9", "1,088") what one of `numbers` shows?"""
    approx, bound = text.startswith("~"), text[:1] in "<>"
    body = text.lstrip("~<>= ").replace(",", "")
    x = float(body)
    if bound:
        return any((y < x) if text.startswith("<") else (y > x) for y in numbers)
    if approx and "e" in body:
        return any(y != 0 and abs(math.log10(abs(y)) - math.log10(x)) < 1 for y in numbers)
    decimals = len(body.split(".")[1]) if "." in body and "e" not in body else 0
    step = 10.0 ** -decimals if "e" not in body else abs(x) * 0.05
    return any(abs(abs(y) - x) <= step / 2 * (1 + 1e-9) + 1e-12 * abs(x) for y in numbers)


@pytest.fixture(scope="module")
def runs():
    out = {}
    for lesson in LESSONS:
        text = (lesson.folder / "README.md").read_text(encoding="utf-8")
        blocks = re.findall(r"```python\n(.*?)```", text, re.S)
        done = subprocess.run([sys.executable, "-W", "ignore", "-c", "\n".join(blocks)], capture_output=True,
                              text=True, cwd=lesson.folder, timeout=300)
        assert done.returncode == 0, (lesson.folder.name, done.stderr[-2000:])
        out[lesson.number] = (text, [float(t.replace(",", "")) for t in PRINTED.findall(done.stdout)])
    return out


def test_every_lesson_prints_the_numbers_its_text_quotes(runs):
    wrong = []
    for lesson in LESSONS:
        text, numbers = runs[lesson.number]
        stated = quoted(text)
        assert stated, f"{lesson.folder.name}: its worked example quotes no printed number"
        wrong += [f"{lesson.folder.name}: {n!r} in `{line}`" for line, n in stated if not printed(n, numbers)]
    assert not wrong, "\n".join(wrong)


def test_a_lesson_that_states_a_bubble_names_both_definitions(runs):
    for lesson in LESSONS:
        text = " ".join(runs[lesson.number][0].split())
        if re.search(r"\bbubble\b", text, re.I) and re.search(r"\(p\s*-\s*1\)\s*/", text):
            assert "(p - 1)/(m + p - 1)" in text.replace("(p-1)/(m+p-1)", "(p - 1)/(m + p - 1)"), lesson.folder.name
            assert "(p - 1)/m" in text.replace("(p-1)/m", "(p - 1)/m") and "Ultra-Scale Playbook" in text, lesson.folder.name


def test_lesson_09_explanation_states_the_bubbles_its_run_prints():
    """The explanation item's 6.3% is estimate's bubble_time_s / step_time_s of the README's run and
    its 6.8% is (p-1)/(m+p-1) with that run's p and m (both printed by the README's example)."""
    from simulator import ParallelConfig, estimate, get_model
    from simulator.grading import get_lesson
    from simulator.grading.check import check_functions, item_name, load_checker

    cfg = ParallelConfig(tp=8, pp=8, dp=16, micro_batch_size=1, global_batch=1536, recompute="selective",
                         sequence_parallel=True)
    r = estimate(get_model("gpt3-175b"), cfg, "a100-80gb")
    p, m = cfg.pp, cfg.microbatches
    name = next(item_name(f) for f in check_functions(load_checker(get_lesson(9))) if "explanation" in item_name(f))
    assert f"({r.bubble_fraction:.1%})" in name and r.bubble_time_s / r.step_time_s == r.bubble_fraction
    assert f"{p - 1}/{m + p - 1} = {(p - 1) / (m + p - 1):.1%}" in name
