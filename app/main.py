"""parasim web app: the entry file only routes to the pages (app/pages/*.py)."""

import sys
from pathlib import Path

import streamlit as st

APP_DIR = Path(__file__).resolve().parent
if str(APP_DIR) not in sys.path:  # pages import the helpers in app/ui.py
    sys.path.insert(0, str(APP_DIR))

st.set_page_config(page_title="parasim", page_icon="🧮", layout="wide")

PAGES = {
    "Learn": [
        st.Page(APP_DIR / "pages/collectives.py", title="Collectives", icon="🔁", default=True),
        st.Page(APP_DIR / "pages/sharding.py", title="Sharding & auto-parallel", icon="🧩"),
        st.Page(APP_DIR / "pages/training.py", title="Training playground", icon="🏋️"),
        st.Page(APP_DIR / "pages/pipelines.py", title="Pipeline schedules", icon="⏱️"),
    ],
    "Plan at scale": [
        st.Page(APP_DIR / "pages/scale.py", title="Scale explorer", icon="📈"),
        st.Page(APP_DIR / "pages/faults.py", title="Fault tolerance", icon="🛟"),
        st.Page(APP_DIR / "pages/lessons.py", title="Lessons", icon="📚"),
    ],
}

with st.sidebar:
    st.markdown("### 🧮 parasim")
    st.caption("See how data, pipeline, tensor and hybrid parallelism train large models: "
               "every number comes from the parasim library, every page can show its code.")

st.navigation(PAGES).run()
