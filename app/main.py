"""parasim web app: the entry file only routes to the pages (app/views/*.py).

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

from ray_session import get_ray  # noqa: E402  (app/ is on the path from here on)

get_ray()  # the emulated devices' embedded local Ray (or --address): once per server

from ui import PAGE_FILES  # noqa: E402

ICONS = {"Collectives": ":material/sync_alt:", "Collective player": ":material/play_circle:",
         "Sharding & auto-parallel": ":material/grid_view:", "Training playground": ":material/model_training:",
         "Pipeline schedules": ":material/view_timeline:", "Context parallelism": ":material/view_week:",
         "Scale explorer": ":material/trending_up:", "Fault tolerance": ":material/health_and_safety:",
         "Lessons": ":material/school:"}
GROUPS = {"Learn": ["Collectives", "Collective player", "Sharding & auto-parallel", "Training playground",
                    "Pipeline schedules", "Context parallelism"],
          "Plan at scale": ["Scale explorer", "Fault tolerance", "Lessons"]}
# every page of ui.PAGE_FILES (the lessons' links) is in the navigation, once
assert sorted(t for ts in GROUPS.values() for t in ts) == sorted(PAGE_FILES), "GROUPS must list every page"
PAGES = {group: [st.Page(APP_DIR / PAGE_FILES[t], title=t, icon=ICONS[t], default=t == "Collectives") for t in titles]
         for group, titles in GROUPS.items()}

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

st.navigation(PAGES).run()
