"""The Sharding & auto-parallel page reads its configuration from the URL and writes it back."""

from app_helpers import APP
from streamlit.testing.v1 import AppTest


def open_sharding(**params) -> AppTest:
    at = AppTest.from_file(str(APP / "views" / "sharding.py"), default_timeout=60)
    at.query_params.update(params)
    at.run()
    assert not at.exception, at.exception
    return at


def test_a_url_configures_the_auto_parallel_tab():
    at = open_sharding(net="2-layer MLP", device_num="8", parallel_mode="auto_parallel", s_act="",
                       enable_alltoall="true", gradients_mean="true", M="64", draw="w2")
    assert at.radio(key="net").value == "2-layer MLP" and at.number_input(key="device_num").value == 8
    assert at.selectbox(key="parallel_mode").value == "auto_parallel"
    assert at.checkbox(key="enable_alltoall").value and at.checkbox(key="gradients_mean").value
    assert at.number_input(key="M").value == 64 and at.text_input(key="s_act").value == ""
    assert at.selectbox(key="draw").value == "w2"
    ops = at.tabs[0].dataframe[0].value  # the configuration reached the library: ReLU set by propagation
    assert list(ops["set by"]) == ["you", "propagation", "you"]


def test_a_url_configures_the_gpt_and_the_tensor_tab():
    at = open_sharding(net="GPT", gpt_tp="2", gpt_sp="true", enable_parallel_optimizer="true",
                       layout_by="MindSpore strategy", t_devices="4", t_strategy="4, 1", rows="8")
    assert at.selectbox(key="gpt_tp").value == 2 and at.checkbox(key="gpt_sp").value
    assert {"AllGather", "ReduceScatter"} <= set(at.tabs[0].table[0].value["collective"])
    assert at.tabs[0].metric[0].value == "[4, 1, 2, 1]"  # the Gather on dp x tp = 4 x 2 (8 devices)
    layouts = at.tabs[0].dataframe[1].value  # a weight cut by (d2, d0) has no DTensor form: said in its cell
    assert any(str(p).startswith("none: dim 0 is split by") for p in layouts["DTensor"])
    assert at.radio(key="layout_by").value == "MindSpore strategy" and at.slider(key="t_devices").value == 4
    assert {m.label: m.value for m in at.tabs[1].metric}["MindSpore strategy"] == "(4, 1)"


def test_every_configuration_widget_is_bound_to_the_url():
    """The browser writes a widget's value into the URL parameter named by the widget's
    query_param_key as it moves (the Chromium test in test_browser.py watches that happen)."""
    at = open_sharding(net="2-layer MLP")  # the MLP's three strategy boxes
    at2 = open_sharding(layout_by="MindSpore strategy")  # the strategy-text form of the tensor tab
    keys = {}
    for a in (at, at2, open_sharding()):
        for kind in ("radio", "number_input", "selectbox", "checkbox", "text_input", "slider", "multiselect"):
            for w in a.get(kind):
                keys[w.key] = w.proto.query_param_key
    unbound = {k for k, q in keys.items() if q != k}
    assert not unbound, unbound
    assert {"net", "device_num", "parallel_mode", "gradients_mean", "enable_alltoall", "enable_parallel_optimizer",
            "gpt_tp", "gpt_sp", "M", "K", "H", "N", "mlp_N", "s1", "out1", "mlp_s1", "s_act", "s2", "draw", "layout_by",
            "rows", "cols", "mesh_dp", "mesh_tp", "dim0", "dim1", "partial", "t_devices", "t_strategy"} == set(keys)


def test_settings_are_kept_when_the_student_leaves_the_page_and_comes_back():
    at = AppTest.from_file(str(APP / "main.py"), default_timeout=60).run()
    at.switch_page(str(APP / "views" / "sharding.py")).run()
    at.checkbox(key="enable_alltoall").check().run()
    at.text_input(key="s1").input("((2, 1), (1, 4))").run()
    at.selectbox(key="dim1").set_value("not split").run()
    at.switch_page(str(APP / "views" / "pipelines.py")).run()
    at.switch_page(str(APP / "views" / "sharding.py")).run()
    assert not at.exception
    assert at.checkbox(key="enable_alltoall").value and at.text_input(key="s1").value == "((2, 1), (1, 4))"
    assert at.selectbox(key="dim1").value == "not split"
    assert {m.label: m.value for m in at.tabs[0].metric}["device matrix"] == "[2, 1, 4]"
