"""parasim web app: the entry file only routes to the pages (app/views/*.py, listed in ui.PAGES).

The pages live in views/, not pages/: a pages/ folder next to the entry file switches Streamlit to
its legacy multipage mode for deep links (e.g. /training) until st.navigation has run once.
"""

import sys
from pathlib import Path

import streamlit as st

APP_DIR = Path(__file__).resolve().parent
if str(APP_DIR) not in sys.path:  # pages import the helpers in app/ui.py
    sys.path.insert(0, str(APP_DIR))

st.set_page_config(page_title="parasim", page_icon="🧮", layout="wide")

from nav import HOME_FILE, HOME_TITLE, PAGES  # noqa: E402  (app/ is on the path from here on; no simulator import)

# Ray is not started here: a page that runs on devices starts it in the background when it needs it
# (app/ray_session.py), so the first page of a cold server renders at once.
NAV: dict = {"": [st.Page(APP_DIR / HOME_FILE, title=HOME_TITLE, icon=":material/home:", default=True)]}
for title, (file, icon, group, _concept) in PAGES.items():
    NAV.setdefault(group, []).append(st.Page(APP_DIR / file, title=title, icon=icon))

# Labels wrap instead of being cut ("time (priced pl..."): metric labels and values, tabs, widgets
CSS = """<style>
[data-testid="stMetricLabel"] *, [data-testid="stMetricLabel"] { white-space: normal !important;
  overflow: visible !important; text-overflow: clip !important; }
[data-testid="stMetricValue"] { font-size: 1.6rem; white-space: normal; overflow-wrap: anywhere; }
[data-testid="stMetricValue"] * { white-space: normal !important; overflow: visible !important;
  text-overflow: clip !important; }
[data-testid="stWidgetLabel"] * { white-space: normal !important; text-overflow: clip !important; }
[data-testid="stMetricDelta"] *, [data-testid="stMetricDelta"] { white-space: normal !important;
  overflow: visible !important; text-overflow: clip !important; }
[data-testid="stMarkdownContainer"] code { white-space: pre-wrap; overflow-wrap: anywhere; }
[data-testid="stMarkdownContainer"] pre { overflow-x: auto; max-width: 100%; }
</style>"""
PRESENT = """<style>
html { font-size: 20px; }
[data-testid="stMainBlockContainer"] { max-width: 100% !important; padding-left: 2rem; padding-right: 2rem; }
[data-testid="stMetricValue"] { font-size: 2.1rem; }
</style>"""

with st.sidebar:
    st.markdown("### parasim")
    st.caption("See how data, pipeline, tensor and hybrid parallelism train large models: "
               "every number comes from the parasim library, every page can show its code.")
    present = st.toggle("Presentation mode", key="present", bind="query-params", persist_state="session",
                        help="larger fonts and full-width charts, for a projector")
st.html(CSS + (PRESENT if present else ""))

st.session_state["_share_slot"] = None  # a page's intro() sets its "Copy link" slot
st.navigation(NAV).run()
