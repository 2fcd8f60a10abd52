"""Grading the lessons: find them (`catalog`), check one submission item by item (`check`) in a
sandboxed process (`sandbox`, `runner`, `codec`), and grade a class (`gradebook`).

A lesson's check.py imports its helpers from here: `from simulator.grading import compare, ok`.
"""

from .catalog import (
           LessonInfo,
           get_lesson,
           lesson_of_folder,
           lessons_dir,
           list_lessons,
           missing_requirements,
           solution_path,
)
from .check import Report, grade_source, lesson_prediction, run_check, submission_status
from .codec import rebuild, type_name
from .items import explanation_item, own_plot_item, prediction_item
from .notebook import notebook_code, read_submission
from .outcomes import (
           ItemResult,
           Outcome,
           choice,
           compare,
           each_case,
           expect,
           figure_of,
           hidden_random,
           item,
           ok,
           partial,
           same_figure,
)
from .sandbox import Limits, Sandbox, shared_folder

__all__ = ["ItemResult", "LessonInfo", "Limits", "Outcome", "Report", "Sandbox", "choice", "compare", "each_case", "expect", "explanation_item", "figure_of", "get_lesson",
           "grade_source", "hidden_random", "item", "lesson_of_folder", "lesson_prediction", "lessons_dir", "list_lessons", "missing_requirements",
           "notebook_code", "ok", "own_plot_item", "partial", "prediction_item", "read_submission", "rebuild", "run_check", "same_figure", "shared_folder", "solution_path", "submission_status",
           "type_name"]
