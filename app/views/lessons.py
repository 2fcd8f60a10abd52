"""Lessons: short exercises, each with a README, an exercise to fill in and a checker."""

from pathlib import Path

import streamlit as st
from ui import coming_soon, intro

LESSONS_DIR = Path(__file__).resolve().parents[2] / "lessons"

intro("Lessons", "Short guided exercises: read, fill in `exercise.py`, then run `check.py` to see if it "
                 "matches the simulator.")


@st.cache_data(show_spinner=False)
def list_lessons(root: str) -> list[tuple[str, str, str]]:
    """(folder name, README text, exercise source) of every lessons/NN_topic folder."""
    out = []
    for d in sorted(p for p in Path(root).glob("[0-9]*_*") if p.is_dir()):
        readme, exercise = d / "README.md", d / "exercise.py"
        out.append((d.name, readme.read_text() if readme.exists() else "",
                    exercise.read_text() if exercise.exists() else ""))
    return out


lessons = list_lessons(str(LESSONS_DIR))
if not lessons:
    coming_soon("Each lesson will appear here with its README, its exercise and the command that checks it.",
                "lessons/NN_topic/")
    st.stop()

name = st.selectbox("Lesson", [n for n, _, _ in lessons], key="lesson")
_, readme, exercise = next(item for item in lessons if item[0] == name)
st.markdown(readme or "_(no README yet)_")
if exercise:
    with st.expander("exercise.py", expanded=False):
        st.code(exercise, language="python")
    st.caption(f"Check your answer: `python lessons/{name}/check.py`")
