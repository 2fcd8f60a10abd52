"""Writing what the grader produces: CSV cells safe to open in a spreadsheet, Markdown that
student text cannot break out of, files that a planted FIFO or link cannot hijack, and the
gradebook export a learning-management system imports (Canvas, Moodle).
"""

from __future__ import annotations

import csv
import io
import os
import re
import stat
import tempfile
from pathlib import Path

from ..errors import ParasimError

# A spreadsheet runs a cell starting with one of these as a formula (OWASP "CSV injection").
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
LMS_FORMATS = ("canvas", "moodle")


def cell(value):
    """A CSV cell: text that a spreadsheet would run as a formula gets a leading apostrophe;
    numbers stay numbers."""
    if isinstance(value, str) and value.startswith(FORMULA_START):
        return "'" + value
    return value


def csv_text(rows: list[dict], fields: list[str] | tuple[str, ...]) -> str:
    """The CSV of `rows` (every text cell escaped with `cell`)."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(fields), extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for row in rows:
        w.writerow({k: cell(v) for k, v in row.items()})
    return buf.getvalue()


def code(text: str) -> str:
    """An inline Markdown code span holding `text` whatever backticks it contains (CommonMark: a
    fence one backtick longer than the longest run inside, padded with spaces)."""
    text = " ".join(str(text).split())
    run = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * (run + 1)
    return f"{fence} {text} {fence}"


def fenced(text: str) -> str:
    """A fenced Markdown code block holding `text` (a fence longer than any inside)."""
    run = max((len(m) for m in re.findall(r"`{3,}", text)), default=2)
    fence = "`" * (run + 1)
    return f"{fence}\n{text}\n{fence}"


def plain(text: str) -> str:
    """Student text (a file or student name) inside Markdown prose: its markup characters escaped."""
    return re.sub(r"([\\`*_{}\[\]()#+\-.!|<>~])", r"\\\1", " ".join(str(text).split()))


def write_file(path: Path, text: str) -> None:
    """Write `text` to `path` without ever opening what is there: a temporary file in the same
    folder (O_CREAT | O_EXCL | O_NOFOLLOW | O_NONBLOCK: a FIFO or link planted under that name is
    never opened, so it cannot hang the grader or redirect the write), then renamed over the name.
    A folder at that name is refused with a one-line error."""
    path = Path(path)
    try:
        if stat.S_ISDIR(os.lstat(path).st_mode):
            raise ParasimError(f"cannot write {path}: a folder is in the way")
    except FileNotFoundError:
        pass
    fd, tmp = tempfile.mkstemp(prefix="." + path.name[:40] + ".", dir=path.parent)   # O_EXCL, mode 0600
    try:
        flags = os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK
        os.close(fd)
        fd = os.open(tmp, flags)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ParasimError(f"cannot write {path}: not a regular file")
        data = text.encode("utf-8")
        while data:
            data = data[os.write(fd, data):]
        os.fsync(fd)
        os.close(fd)
        fd = -1
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        Path(tmp).unlink(missing_ok=True)
        raise


def lms_rows(rows: list[dict], assignment: str, max_points: float, lms: str) -> tuple[list[str], list[dict]]:
    """The gradebook in the import format of `lms`:
    - canvas: Student, ID, SIS User ID, SIS Login ID, Section, then the assignment's column, with a
      "Points Possible" row first (Canvas matches students on SIS Login ID; the others may be blank);
    - moodle: Username, the grade item's column, and Feedback (map Username to "username" in
      Moodle's "Import grades from CSV").
    The student is the submission's name (its file or folder name)."""
    if lms not in LMS_FORMATS:
        raise ParasimError(f"--lms must be one of {', '.join(LMS_FORMATS)}, got {lms!r}")
    if lms == "canvas":
        fields = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", assignment]
        out = [{"Student": "Points Possible", assignment: max_points}]
        out += [{"Student": r["student"], "SIS Login ID": r["student"], assignment: r["points"]} for r in rows]
        return fields, out
    fields = ["Username", assignment, "Feedback"]
    return fields, [{"Username": r["student"], assignment: r["points"],
                     "Feedback": f"{r['passed']}/{r['total']} items ({r['status']})"} for r in rows]
