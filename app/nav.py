"""The app's pages, importable without the simulator (the router and the first paint of the home
page need nothing heavier): title -> file, icon, navigation group, and the concept it teaches."""

import streamlit as st

# The pages: title (as main.py registers them, and as lessons name them in `app_pages`) -> file, icon,
# the navigation group, and the concept the page teaches (the home page's map of the concepts)
PAGES = {
    "Collectives": ("views/collectives.py", ":material/sync_alt:", "Learn",
                    "how ring, tree and halving-doubling move the bytes of an AllReduce, and what it costs"),
    "Collective player": ("views/player.py", ":material/play_circle:", "Learn",
                          "every rank's buffer after each step of a collective, played step by step"),
    "Sharding & auto-parallel": ("views/sharding.py", ":material/grid_view:", "Learn",
                                 "a tensor cut over a device mesh; the collectives a sharding strategy inserts"),
    "Training playground": ("views/training.py", ":material/model_training:", "Learn",
                            "data, pipeline, tensor, expert, context and hybrid parallelism trained for real on "
                            "emulated devices, checked against one device"),
    "Pipeline schedules": ("views/pipelines.py", ":material/view_timeline:", "Learn",
                           "GPipe, 1F1B, interleaved, zero-bubble and DualPipe: the bubble and the memory in flight"),
    "Context parallelism": ("views/context.py", ":material/view_week:", "Learn",
                            "a long sequence split over devices: ring attention and all-to-all (Ulysses)"),
    "Scale explorer": ("views/scale.py", ":material/trending_up:", "Plan at scale",
                       "step time, MFU and memory of a GPT on thousands of GPUs; the search over configurations"),
    "Fault tolerance": ("views/faults.py", ":material/health_and_safety:", "Plan at scale",
                        "a device fails mid-run: recovery from a replica or a checkpoint, and goodput"),
    "Lessons": ("views/lessons.py", ":material/school:", "Plan at scale",
                "guided exercises checked item by item, each linked to the pages it uses"),
}
PAGE_FILES = {title: file for title, (file, *_rest) in PAGES.items()}
HOME_FILE, HOME_TITLE = "views/home.py", "Home"  # the landing page, at "/"
OLD_LANDING = "Collectives"  # the landing page before the home page: "/?kind=..." links were its


def redirect_old_links() -> None:
    """On the home page: a link to "/" carrying parameters other than the home page's own (and
    `present`) was written when the Collectives page was the landing page; open it there."""
    own = {"present", "home_p", "home_m"}
    params = {k: st.query_params.get_all(k) for k in st.query_params if k not in own}
    if params:
        try:
            st.switch_page(PAGE_FILES[OLD_LANDING], query_params=params)
        except Exception:  # noqa: BLE001  (a page run on its own, e.g. AppTest, has no router to switch through)
            pass

