"""The lessons on disk: discover lessons/NN_topic/ folders and read their metadata.

A lesson folder holds README.md, exercise.py (TODOs) and check.py (the public checks); the reference
solution is instructor/NN_topic/solution.py (`solution_path`), outside the student's folder. check.py declares

    LESSON = {"title": ..., "goals": [...], "app_pages": [...], "requires": [...], "minutes": 45,
              "prerequisites": [...],          # a literal, read with ast (no import needed)
              "withhold": {"one_f_one_b_text": ["simulator.parallel.schedule_registry:make_schedule"]}}

`withhold` names, per student function, parasim's own functions that compute its answer: while
that function runs in the sandbox they raise (`runner.withheld`), so calling parasim's solver
for the thing being graded does not earn the item.

`requires` names what the lesson needs from parasim: "search_configs" (a public name of
`simulator`), "strategy:tp" (a training strategy that compiles), "module:simulator.faults".
A lesson whose requirements are missing is listed with status "waiting for ...".
"""

from __future__ import annotations

import ast
import importlib.util
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ParasimError

_FOLDER = re.compile(r"^(\d\d)_[a-z0-9_]+$")


@dataclass(frozen=True)
class LessonInfo:
    number: int
    slug: str
    title: str
    folder: Path
    goals: tuple[str, ...] = ()
    app_pages: tuple[str, ...] = ()
    requires: tuple[str, ...] = ()
    minutes: int = 45
    prerequisites: tuple[int, ...] = ()
    missing: tuple[str, ...] = field(default=())
    withhold: tuple[tuple[str, tuple[str, ...]], ...] = ()   # (student function, parasim functions it may not call)

    @property
    def status(self) -> str:
        return "ready" if not self.missing else "waiting for " + ", ".join(self.missing)

    def to_dict(self) -> dict:
        """Plain data (the folder as a string, plus `status`)."""
        return {"number": self.number, "slug": self.slug, "title": self.title, "folder": str(self.folder),
                "goals": list(self.goals), "app_pages": list(self.app_pages), "requires": list(self.requires),
                "minutes": self.minutes, "prerequisites": list(self.prerequisites), "status": self.status}


def lessons_dir() -> Path:
    """The lessons/ folder: $PARASIM_LESSONS, else next to the simulator package (the repository)."""
    env = os.environ.get("PARASIM_LESSONS")
    return Path(env) if env else Path(__file__).resolve().parents[2] / "lessons"


def instructor_dir() -> Path:
    """The instructor's folder (reference solutions, hidden checks): $PARASIM_INSTRUCTOR, else
    instructor/ next to lessons/ in the repository. Never installed with the student package and
    never readable by a sandboxed submission (`confine.protected`)."""
    env = os.environ.get("PARASIM_INSTRUCTOR")
    return Path(env) if env else Path(__file__).resolve().parents[2] / "instructor"


def solution_path(lesson: LessonInfo) -> Path:
    """The reference solution of a lesson, in the instructor's folder (not shipped to students)."""
    return instructor_dir() / lesson.folder.name / "solution.py"


def public_names(init_py: Path | None = None) -> frozenset[str]:
    """The names `import simulator` provides, read from simulator/__init__.py with ast (the grader
    sits below the public namespace, so it reads it rather than importing it): the names of its
    tables of the public API (`_API`: module -> names, `_RENAMED`: name -> (module, name there),
    `_SUBMODULES`), every subpackage they come from (`simulator.cost` is an attribute too), and
    every public name it defines itself."""
    path = init_py or Path(__file__).resolve().parents[1] / "__init__.py"
    tables: dict = {"_API": {}, "_RENAMED": {}, "_SUBMODULES": ()}
    names: set[str] = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        for target in targets:
            if isinstance(target, ast.Name) and target.id in tables:
                tables[target.id] = ast.literal_eval(node.value)
            elif isinstance(target, ast.Name):
                names.add(target.id)
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
    modules = [*tables["_API"], *(module for module, _name in tables["_RENAMED"].values())]
    names.update(name for exported in tables["_API"].values() for name in exported)
    names.update(tables["_RENAMED"], tables["_SUBMODULES"], (module.split(".")[0] for module in modules))
    return frozenset(n for n in names if not n.startswith("_"))


def missing_requirements(requires) -> tuple[str, ...]:
    """The entries of `requires` that this parasim does not provide yet."""
    public = public_names()
    missing = []
    for req in requires:
        if req.startswith("strategy:"):
            from ..parallel.strategies import COMPILERS

            found = req.split(":", 1)[1] in COMPILERS
        elif req.startswith("module:"):
            try:
                found = importlib.util.find_spec(req.split(":", 1)[1]) is not None
            except ModuleNotFoundError:
                found = False
        else:
            found = req in public
        if not found:
            missing.append(req)
    return tuple(missing)


def _read_meta(check_py: Path) -> dict:
    """The LESSON = {...} literal of a check.py, without importing it."""
    tree = ast.parse(check_py.read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "LESSON" for t in node.targets):
            return ast.literal_eval(node.value)
    return {}


def list_lessons(root: Path | None = None) -> list[LessonInfo]:
    """Every lessons/NN_topic/ folder with a check.py, in order: number, title, folder, goals,
    the app pages it uses, and whether parasim already has the API it needs."""
    root = Path(root) if root else lessons_dir()
    out = []
    for folder in sorted(p for p in root.iterdir() if p.is_dir() and _FOLDER.match(p.name)) if root.is_dir() else []:
        check_py = folder / "check.py"
        if not check_py.is_file():
            continue
        meta = _read_meta(check_py)
        requires = tuple(meta.get("requires", ()))
        out.append(LessonInfo(int(folder.name[:2]), folder.name[3:], meta.get("title", folder.name[3:]), folder,
                              tuple(meta.get("goals", ())), tuple(meta.get("app_pages", ())), requires,
                              int(meta.get("minutes", 45)), tuple(meta.get("prerequisites", ())),
                              missing_requirements(requires),
                              tuple((str(k), tuple(v)) for k, v in dict(meta.get("withhold", {})).items())))
    return out


def get_lesson(number: int | str, root: Path | None = None) -> LessonInfo:
    """Lesson by number ("2", "02") or folder name ("02_collectives")."""
    lessons = list_lessons(root)
    text = str(number).strip()
    for lesson in lessons:
        if text == lesson.folder.name or (text.isdigit() and int(text) == lesson.number):
            return lesson
    known = ", ".join(f"{x.number:02d}" for x in lessons) or "none"
    raise ParasimError(f"no lesson {number!r}; known lessons: {known}")


def lesson_of_folder(folder: Path, root: Path | None = None) -> LessonInfo | None:
    """The lesson whose folder name `folder` carries (a student's copy `~/work/05_pipeline_bubbles`
    or the lesson folder itself), else None."""
    name = Path(folder).resolve().name
    if not _FOLDER.match(name):
        return None
    for lesson in list_lessons(root):
        if lesson.folder.name == name:
            return lesson
    return None
