"""Lessons: short exercises, each with a README, an exercise to fill in, a checker, and the app pages it uses."""

import re
from pathlib import Path

import streamlit as st
from streamlit.errors import StreamlitAPIException
from ui import APP_URL, BIND, PAGE_FILES, deep_links, intro, link_to, remember, restore, show_code, show_error

from simulator import (
    Limits,
    ParasimError,
    get_lesson,
    grade_source,
    lesson_prediction,
    list_lessons,
    notebook_code,
    run_check,
)
from simulator.grading import solution_path

intro("Lessons", "Short guided exercises: read the README, fill in the TODOs of `exercise.py`, then "
                 "`parasim lesson check N` compares your functions with the simulator's own results, item by "
                 "item. Each lesson links to the app pages it uses.")


@st.cache_data(show_spinner=False)
def lessons() -> list[dict]:
    """Every lessons/NN_topic folder: metadata, README and exercise (plain data)."""
    out = []
    for info in list_lessons():
        readme, exercise = info.folder / "README.md", info.folder / "exercise.py"
        out.append({**info.to_dict(), "readme": readme.read_text() if readme.exists() else "",
                    "exercise": exercise.read_text() if exercise.exists() else ""})
    return out


def page_links(titles, key: str) -> None:
    """st.page_link to each app page the lesson uses (inside the router; plain names otherwise)."""
    cols = st.columns(max(len(titles), 1) + 1)
    for col, title in zip(cols, titles):
        path = PAGE_FILES.get(title)
        with col:
            try:
                st.page_link(path, label=title, icon=":material/open_in_new:")
            except StreamlitAPIException:  # a page file run on its own (tests) has no router to link through
                st.markdown(f"→ **{title}**")


IMAGE = re.compile(r"!\[([^\]]*)\]\(([^)\s]+)\)")
DETAILS = re.compile(r"<details>\s*<summary>(.*?)</summary>(.*?)</details>", re.DOTALL)
IMAGE_ROW = re.compile(r"^\|(\s*!\[[^\]]*\]\([^)\s]+\)\s*\|)+\s*$")  # | ![a](x.png) | ![b](y.png) |
TABLE_RULE = re.compile(r"^\|(\s*:?-+:?\s*\|)+\s*$")  # |---|---|


def show_image(path: str, caption: str, folder: Path, width: int | str = 480) -> None:
    """A README figure from the lesson folder (never a path outside it)."""
    file = (folder / path).resolve()
    if file.is_file() and folder.resolve() in file.parents:
        st.image(str(file), caption=caption, width=width)


def show_markdown(text: str, folder: Path) -> None:
    """Markdown with its relative images shown; a table row of images becomes figures side by side
    under their header cells (Streamlit markdown cannot show local images inside a table)."""
    lines, buf = text.splitlines(), []

    def flush():
        chunk, pos = "\n".join(buf), 0
        for m in IMAGE.finditer(chunk):
            st.markdown(chunk[pos:m.start()])
            show_image(m.group(2), m.group(1), folder)
            pos = m.end()
        if chunk[pos:].strip():
            st.markdown(chunk[pos:])
        buf.clear()

    for line in lines:
        if not IMAGE_ROW.match(line.strip()):
            buf.append(line)
            continue
        header = []
        if len(buf) >= 2 and TABLE_RULE.match(buf[-1].strip()) and buf[-2].strip().startswith("|"):
            header = [c.strip() for c in buf[-2].strip().strip("|").split("|")]
            del buf[-2:]
        flush()
        images = IMAGE.findall(line)
        for i, (col, (alt, path)) in enumerate(zip(st.columns(len(images)), images)):
            with col:
                if i < len(header) and header[i]:
                    st.markdown(f"**{header[i]}**")
                show_image(path, alt, folder, width="stretch")  # a column may be narrower than the figure
    flush()


def show_readme(text: str, folder: Path) -> None:
    """The README as markdown, its figures shown from the lesson folder, and each
    <details><summary>..</summary>..</details> (the quiz answers) folded into an expander."""
    if not text:
        st.markdown("_(no README yet)_")
        return
    text = text.replace(APP_URL + "/", "/")  # links to the app open in this app, wherever it runs
    pos = 0
    for m in DETAILS.finditer(text):
        show_markdown(text[pos:m.start()], folder)
        with st.expander(m.group(1).strip() or "Details"):
            show_markdown(m.group(2), folder)
        pos = m.end()
    show_markdown(text[pos:], folder)


def graded(number: int, source: str, name: str):
    """The same grading as `parasim lesson grade`: a sandbox, the lesson's checker in this process."""
    return grade_source(get_lesson(number), source, name, Limits(timeout_s=30.0))


def students_output(text: str) -> str:
    """What the student's program printed, without the interpreter's own warnings about how the
    sandbox started it (runpy's RuntimeWarning is no output of theirs)."""
    lines = (text or "").splitlines()
    keep, skip = [], False
    for line in lines:
        if "runpy" in line and "Warning" in line:
            skip = True  # the warning and its indented continuation
            continue
        if skip and line.startswith((" ", "\t")):
            continue
        skip = False
        keep.append(line)
    return "\n".join(keep).strip()


def show_report(report) -> None:
    """Per item: its status (passed, wrong, error, timeout), points, and expected / found / hint:
    the feedback file a gradebook writes (`Report.to_dict`: a hidden item shows its status only)."""
    if report.status in ("empty", "unchanged"):
        st.warning("This is " + ("an empty file" if report.status == "empty" else "the exercise as handed out")
                   + ": fill in the TODOs first.")
    st.dataframe([{"#": i["number"], "item": i["name"], "result": i["status"], "points": f"{i['earned']:g}/{i['points']:g}",
                   "expected": i["expected"], "found": i["found"], "hint": i["hint"]}
                  for i in report.to_dict()["items"]], hide_index=True, width="stretch")
    (st.success if report.ok else st.error)(f"{report.passed} of {report.total} items pass, "
                                            f"{report.points:g} of {report.max_points:g} points")
    output = students_output(report.output)
    if output:
        st.caption(f"your program's last output: {output}")


@st.cache_data(show_spinner=False)
def prediction(number: int) -> dict | None:
    return lesson_prediction(get_lesson(number))


items = lessons()
if not items:
    st.info("No lessons found in lessons/.")
    st.stop()

st.dataframe([{"#": d["number"], "lesson": d["title"], "minutes": d["minutes"],
               "after": ", ".join(map(str, d["prerequisites"])) or "-", "app pages": ", ".join(d["app_pages"]),
               "status": d["status"]} for d in items], hide_index=True, width="stretch",
             height=35 * (len(items) + 1) + 3)

labels = {d["number"]: f"{d['number']:02d} · {d['title']}" for d in items}
restore("lessons")
number = st.selectbox("Open lesson", list(labels), format_func=labels.get, key="lesson", **BIND)  # ?lesson=05 · title
remember("lessons", "lesson", formats={"lesson": labels.get})
d = next(x for x in items if x["number"] == number)
st.subheader(labels[number])
c = st.columns([3, 1])
with c[0]:
    st.markdown("**You will**\n" + "\n".join(f"- {g}" for g in d["goals"]))
with c[1]:
    st.metric("minutes", d["minutes"], help="about how long the lesson takes, exercise included")
    st.caption(f"status: {d['status']}")
st.markdown("**Open in the app**")
page_links(d["app_pages"], key=f"links-{number}")
for label, title, params in deep_links(d["readme"]):  # the configurations the README discusses
    link_to(title, f"{title}: {label}", **params)
st.code(f"parasim lesson check {number}      # check your exercise.py\n"
        f"parasim lesson check {number} instructor/{d['folder'].split('/')[-1]}/solution.py   # the reference "
        "(instructors)", language="bash")
tab_readme, tab_ex, tab_mine, tab_check, tab_predict = st.tabs(
    ["README", "exercise.py", "Check your exercise", "Check the reference solution", "Predict, then reveal"])
with tab_readme:
    show_readme(d["readme"], Path(d["folder"]))
with tab_ex:
    st.code(d["exercise"], language="python")
with tab_mine:
    st.markdown("Upload your `exercise.py` (or a notebook) or paste your code: it runs in a sandbox (its own "
                "process, a time limit per item, a memory limit, no new processes), and the checker compares "
                "what your functions return with parasim's own results, item by item.")
    upload = st.file_uploader("Your exercise.py or .ipynb", type=["py", "ipynb"], key=f"upload-{number}")
    pasted = st.text_area("…or paste your code", key=f"paste-{number}", height=160)
    if st.button("Check my code", key="check-mine", disabled=upload is None and not pasted.strip()):
        name = upload.name if upload is not None else "pasted code"
        try:
            raw = upload.getvalue().decode("utf-8", "replace") if upload is not None else pasted
            source = notebook_code(raw, name) if name.endswith(".ipynb") else raw
            with st.spinner("grading in a sandbox..."):
                report = graded(number, source, name)
        except ParasimError as e:
            show_error(e, f"{name} could not be graded: ")
        else:
            show_report(report)
with tab_check:
    reference = solution_path(get_lesson(number))
    if not reference.is_file():
        st.info("The reference solutions live in the instructor's folder (instructor/NN_topic/solution.py), "
                "which is not part of a student's copy.")
    elif st.button("Run the checker on solution.py", key="check"):
        show_report(run_check(number, file=reference))
with tab_predict:
    question = prediction(number)
    if question is None:
        st.info("This lesson has no predict-then-reveal question; its README ends with a pop quiz.")
    else:
        st.markdown(f"**{question['question']}**  \n_{question['unit']}_")
        guess = st.number_input("Your prediction", key=f"guess-{number}", value=None, format="%.6g")
        if st.button("Reveal", key="reveal", disabled=guess is None):
            right = abs(guess - question["answer"]) <= question["rel_tol"] * abs(question["answer"])
            (st.success if right else st.warning)(
                f"{'Right' if right else 'Not quite'}: parasim gives {question['answer']:.6g} (you said {guess:.6g}).")
            st.markdown(question["explain"])
show_code(list_lessons, run_check, grade_source, key="code")
