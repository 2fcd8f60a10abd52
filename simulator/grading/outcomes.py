"""What one check item finds: `Outcome` and the helpers a lesson's check.py uses to build one.

A check item calls the student's functions and compares them with parasim's own results:

    def check_ring_bytes(student):
        "ring bytes per rank equal 2(n-1)/n x S"     # the item's name (first docstring line)
        return compare(expected, student.ring_bytes(4, 1024), hint="...")
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Outcome:
    """What one check item found. `expected` and `found` are short printable texts; `credit` is
    the share of the item's points earned (partial credit, 0..1; None: all when passed, else none)."""

    passed: bool
    expected: str = ""
    found: str = ""
    hint: str = ""
    credit: float | None = None

    @property
    def share(self) -> float:
        if self.credit is None:
            return 1.0 if self.passed else 0.0
        c = float(self.credit)
        return min(max(c, 0.0), 1.0) if c == c else 0.0


def item(points: float = 1.0, hidden: bool = False):
    """Mark a check item: its points (default 1) and whether it is hidden (its feedback shows the
    status only, never the case, the expected value or a hint). The instructor's hidden.py items
    are hidden whatever they say."""
    if not (isinstance(points, (int, float)) and 0 < points < 1e6):
        raise ValueError(f"an item's points must be a positive number, got {points!r}")

    def mark(fn):
        fn.points, fn.hidden = float(points), bool(hidden)
        return fn
    return mark


def partial(done: int, total: int, expected: str, found, hint: str = "") -> Outcome:
    """An item worth `done / total` of its points (cases passed out of cases tried)."""
    return Outcome(done == total, expected, short(found) if not isinstance(found, str) else found, hint,
                   done / max(total, 1))


STATUSES = ("passed", "wrong", "error", "timeout")


@dataclass(frozen=True)
class ItemResult:
    """One graded item of a report: its number (1-based, file order), name, verdict and texts.
    `status` is one of `STATUSES`: "passed", "wrong" (an answer, not the right one), "error" (an
    exception, a crash, a file that does not import, a TODO left) or "timeout"."""

    number: int
    name: str
    passed: bool
    expected: str
    found: str
    hint: str
    status: str = ""
    points: float = 1.0
    earned: float = 0.0
    hidden: bool = False

    def to_dict(self) -> dict:
        """Plain data: every field (dataclasses.asdict gives the same)."""
        return {"number": self.number, "name": self.name, "passed": self.passed, "expected": self.expected,
                "found": self.found, "hint": self.hint, "status": self.status or ("passed" if self.passed else "wrong"),
                "points": self.points, "earned": self.earned, "hidden": self.hidden}

    def shown(self) -> ItemResult:
        """What the student may see: a hidden item keeps its status and points, not its texts."""
        if not self.hidden:
            return self
        return replace(self, expected="(hidden test)", found="(hidden test)", hint="")


def short(value: Any, limit: int = 160) -> str:
    """A one-line printable text of `value` (arrays: shape and first values)."""
    if isinstance(value, np.ndarray):
        text = f"array{value.shape} " + np.array2string(value.ravel()[:6], precision=4, separator=", ")
    elif isinstance(value, float):
        text = f"{value:.6g}"
    else:
        text = repr(value)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _close(a: Any, b: Any, rtol: float, atol: float) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k], rtol, atol) for k in a)
    if isinstance(a, str) or isinstance(b, str):
        return a == b
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) and not _numeric(a):
        return len(a) == len(b) and all(_close(x, y, rtol, atol) for x, y in zip(a, b))
    try:
        x, y = np.asarray(a), np.asarray(b)
        if x.dtype == object or y.dtype == object:
            return a == b
        return x.shape == y.shape and bool(np.allclose(x, y, rtol=rtol, atol=atol))
    except (TypeError, ValueError):
        return a == b


def _numeric(seq) -> bool:
    try:
        return np.asarray(seq).dtype.kind in "biuf"
    except (TypeError, ValueError):
        return False


def compare(expected: Any, found: Any, hint: str = "", rtol: float = 1e-9, atol: float = 1e-12) -> Outcome:
    """Pass when `found` equals `expected` (numbers and arrays: allclose with rtol, atol;
    sequences and dicts element by element; anything else ==)."""
    if found is None:
        return Outcome(False, short(expected), "None (did the function forget to return?)", hint)
    return Outcome(_close(expected, found, rtol, atol), short(expected), short(found), hint)


def ok(found: str = "as expected") -> Outcome:
    """A passed item (for checks that loop over many cases and return early on the first miss)."""
    return Outcome(True, "", found, "")


def each_case(cases, case, rtol: float = 1e-9, atol: float = 1e-12) -> Outcome:
    """An item over many cases: `case(*c)` returns (expected, found, hint) for each case `c` (a tuple
    of arguments) in order, or None to leave `c` out; the outcome is `compare`'s on the first case whose answer differs,
    else `ok()`. Every case is graded with the same tolerance: a close answer moves on to the next
    case, a wrong one stops there with that case's hint."""
    for c in cases:
        got = case(*c)
        if got is None:
            continue
        out = compare(got[0], got[1], got[2], rtol, atol)
        if not out.passed:
            return out
    return ok()


def expect(condition: bool, expected: str, found: Any, hint: str = "") -> Outcome:
    """Pass when `condition` holds; `expected` describes the rule in words."""
    return Outcome(bool(condition), expected, short(found) if not isinstance(found, str) else found, hint)


def hidden_random() -> random.Random:
    """The generator of an item's hidden parameters, drawn at grading time from the operating
    system's entropy (`random.SystemRandom`): a submission cannot precompute its answers for them,
    so only a function that computes the thing itself earns the item."""
    return random.SystemRandom()


def figure_of(value) -> dict | None:
    """The data of a figure a submission returned (`simulator.viz.figure_data`: lines, rectangles,
    texts): the sandbox sends it as that data; a Figure from a file imported here is read the same
    way. None when `value` is no figure."""
    if type(value).__module__ == "matplotlib.figure" and type(value).__name__ == "Figure":
        from ..viz.figure_data import figure_data

        return figure_data(value, collections=True)
    if isinstance(value, dict) and isinstance(value.get("axes"), list) and "suptitle" in value:
        return value
    return None


def choice(found, right: str, hints: dict[str, str]) -> Outcome:
    """An explanation item answered by one letter: passes on `right`; a wrong letter gets the hint
    that says why that choice does not match what the student measured."""
    got = str(found).strip().lower()[:1]
    return expect(got == right, "the choice that matches what you measured", got or "no letter",
                  hints.get(got, "answer with one letter: " + ", ".join(sorted({right, *hints}))))


def same_figure(found, want_fig, what: str, hint: str) -> Outcome:
    """A plot item: the figure the student returned shows the data of `want_fig` (parasim's own
    drawing of the same run): every line's points and every bar, block and lane rectangle, per
    axes (titles, colours and pixels are the student's affair)."""
    data, want = figure_of(found), figure_of(want_fig)
    if data is None:
        return expect(False, "a matplotlib Figure (return the figure, do not save or show it)",
                      type(found).__name__, hint)

    def content(d):   # per axes: its rectangles and its lines' points, in a fixed order
        return [[sorted((list(r) for r in ax["rects"]), key=repr), sorted(([ln["x"], ln["y"]] for ln in ax["lines"]), key=repr)]
                for ax in d["axes"]]

    from ..viz.figure_data import same

    mine, theirs = content(data), content(want)
    if not any(bars or lines for bars, lines in theirs):
        raise ValueError(f"parasim's figure of {what} has no bars or lines: nothing to grade a plot against")
    count = lambda c: (sum(len(a[0]) for a in c), sum(len(a[1]) for a in c))  # noqa: E731
    return expect(same(mine, theirs), "the {} bars and {} lines of ".format(*count(theirs)) + what,
                  "{} bars and {} lines, not that run's".format(*count(mine)), hint)
