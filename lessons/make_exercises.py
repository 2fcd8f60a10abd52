"""Write every lesson's exercise.py from its reference solution, instructor/NN_topic/solution.py
(run after editing a solution; the solutions live outside lessons/, which students get).

In solution.py the student's part of a function sits between two markers:

    # BEGIN SOLUTION: cut x into n chunks and pass them around the ring
    ...the reference code...
    # END SOLUTION

exercise.py gets, at the same indentation, `raise NotImplementedError("TODO: <the marker text>")`;
every other line is copied, and "SOLUTION" in the title line becomes "EXERCISE". Run:

    python lessons/make_exercises.py           # rewrite all exercise.py files
    python lessons/make_exercises.py --check   # exit 1 if any exercise.py is out of date
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
INSTRUCTOR = Path(os.environ.get("PARASIM_INSTRUCTOR") or HERE.parent / "instructor")
BEGIN = re.compile(r"^(\s*)# BEGIN SOLUTION:?\s*(.*)$")
END = re.compile(r"^\s*# END SOLUTION\s*$")


def exercise_text(solution: str) -> str:
    out, inside = [], False
    for line in solution.splitlines():
        m = BEGIN.match(line)
        if m:
            if inside:
                raise ValueError(f"nested BEGIN SOLUTION: {line!r}")
            inside = True
            todo = (m.group(2).strip() or "your code here").replace("\\", "\\\\").replace('"', '\\"')
            out.append(f'{m.group(1)}raise NotImplementedError("TODO: {todo}")')
        elif END.match(line):
            if not inside:
                raise ValueError("END SOLUTION without BEGIN")
            inside = False
        elif not inside:
            out.append(line)
    if inside:
        raise ValueError("BEGIN SOLUTION without END")
    text = "\n".join(out) + "\n"
    return text.replace("(SOLUTION)", "(EXERCISE)", 1)


def main(argv: list[str]) -> int:
    stale = []
    for sol in sorted(INSTRUCTOR.glob("[0-9][0-9]_*/solution.py")):
        ex = HERE / sol.parent.name / "exercise.py"
        text = exercise_text(sol.read_text(encoding="utf-8"))
        if ex.exists() and ex.read_text(encoding="utf-8") == text:
            continue
        stale.append(ex)
        if "--check" not in argv:
            ex.write_text(text, encoding="utf-8")
    for ex in stale:
        print(("out of date: " if "--check" in argv else "wrote ") + str(ex.relative_to(HERE)))
    return 1 if stale and "--check" in argv else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
