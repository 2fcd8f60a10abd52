"""Read a submission: a .py file's text, or the code cells of a Jupyter notebook (.ipynb JSON).

A notebook's code cells are joined in order; lines starting with `%` or `!` (IPython magics and
shell escapes) become comments, since plain Python cannot run them.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..errors import ParasimError

SUFFIXES = (".py", ".ipynb")


def notebook_code(text: str, name: str = "notebook") -> str:
    """The code cells of an .ipynb document, as one Python text."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise ParasimError(f"{name} is not a notebook: its JSON does not parse ({e.msg} at line {e.lineno})") from None
    cells = doc.get("cells") if isinstance(doc, dict) else None
    if not isinstance(cells, list):
        raise ParasimError(f"{name} is not a notebook: no list of cells")
    chunks = []
    for cell in cells:
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        src = cell.get("source", "")
        src = "".join(src) if isinstance(src, list) else str(src)
        lines = [("# " + ln) if ln.lstrip().startswith(("%", "!")) else ln for ln in src.splitlines()]
        chunks.append("\n".join(lines))
    return "\n\n".join(chunks) + "\n"


def read_submission(path: Path) -> str:
    """The Python text of a .py or .ipynb submission."""
    path = Path(path)
    raw = path.read_bytes().decode("utf-8", "replace")
    return notebook_code(raw, path.name) if path.suffix == ".ipynb" else raw
