"""The examples of README.md and docs/*.md, as a reader finds them (one home for reading them:
tests/test_docs_examples.py runs every one; tests that check one example's output take it here).

An example is a ```python block, a ```bash block (its lines run in order in one shell), or a
table row whose first cell is a `parasim ...` command. The README's set-up commands (the blocks
that `pip install`) are CI's own steps (.ci/run) and are not examples here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


@dataclass(frozen=True)
class Example:
    file: str        # README.md or docs/NAME.md
    heading: str     # the section it is under
    kind: str        # "python", "bash" or "row" (one parasim command of a table)
    code: str
    says: str = ""   # a table row's second cell: what the docs say it prints

    @property
    def id(self) -> str:
        return f"{self.file}:{self.heading}:{self.kind}:{self.code.strip().splitlines()[0][:60]}"


def _sections(text: str):
    heading = ""
    for part in re.split(r"^(#{1,3} .*)$", text, flags=re.M):
        if re.match(r"#{1,3} ", part):
            heading = part.lstrip("#").strip()
        else:
            yield heading, part


def examples(path: Path) -> list[Example]:
    name = str(path.relative_to(ROOT))
    found = []
    for heading, body in _sections(path.read_text(encoding="utf-8")):
        for kind, code in re.findall(r"^```(python|bash)\n(.*?)^```", body, flags=re.M | re.S):
            if kind == "bash" and "pip install" in code:
                continue  # a set-up command: .ci/run runs it
            found.append(Example(name, heading, kind, code))
        for command, says in re.findall(r"^\| `(parasim [^`]+)` \| (.*) \|$", body, flags=re.M):
            found.append(Example(name, heading, "row", command, says))
    return found


def all_examples() -> list[Example]:
    return [e for path in DOCS for e in examples(path)]


def section_examples(file: str, heading: str, kind: str = "python") -> list[str]:
    """The code of the examples of one kind under one heading of one file, in order."""
    return [e.code for e in all_examples() if e.file == file and e.heading == heading and e.kind == kind]
