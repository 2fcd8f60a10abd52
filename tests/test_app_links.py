"""Links: a URL value a page cannot use is named in a notice with the value used instead (never a
silent fallback); a valid one gives no notice; the "Copy link" link holds every input, defaults too."""

from urllib.parse import parse_qs

from app_helpers import APP
from streamlit.testing.v1 import AppTest


def opened(name: str, **params) -> AppTest:
    at = AppTest.from_file(str(APP / "views" / f"{name}.py"), default_timeout=120)
    at.query_params.update(params)
    at.run()
    assert not at.exception, at.exception
    return at


def notices(at) -> list[str]:
    return [w.value for w in at.warning if "The link's" in w.value]


def test_an_invalid_url_value_is_named_with_the_value_used():
    at = opened("pipelines", p="999", m="16")
    assert notices(at) == ["The link's p=999 is not a value this page offers for `p`: it uses p=4 instead."]
    assert at.slider(key="p").value == 4 and at.slider(key="m").value == 16  # the valid one is used
    at.slider(key="p").set_value(6).run()  # the user moved on: the notice goes
    assert notices(at) == []
    at = opened("player", step="999")
    assert notices(at) == ["The link's step=999 is not a value this page offers for `step`: it uses step=0 instead."]
    at = opened("collectives", kind="all_reduce_9", n="8")
    assert notices(at) == ["The link's kind=all_reduce_9 is not a value this page offers for `kind`: it uses "
                           "kind=all_reduce instead."]
    at = opened("lessons", lesson="99 · no such lesson")
    assert len(notices(at)) == 1 and "lesson=99 · no such lesson" in notices(at)[0]


def test_valid_url_values_give_no_notice():
    at = opened("pipelines", p="8", m="16", t_f="1.5", schedules=["gpipe", "1f1b"])
    assert notices(at) == [] and at.slider(key="t_f").value == 1.5
    at = opened("sharding", net="2-layer MLP", enable_alltoall="true", s_act="")
    assert notices(at) == []
    at = opened("lessons", lesson="05 · Pipeline bubbles: GPipe vs 1F1B")
    assert notices(at) == [] and at.selectbox(key="lesson").value == 5


def copy_link(at) -> dict:
    link = next(c.value for c in at.code if c.value.startswith("?"))
    return parse_qs(link[1:], keep_blank_values=True)


def test_the_copy_link_holds_every_input_defaults_included():
    at = opened("sharding", net="2-layer MLP")
    q = copy_link(at)
    assert q["net"] == ["2-layer MLP"] and q["mlp_N"] == ["8"] and q["device_num"] == ["8"]
    assert q["mlp_s1"] == ["((2, 1), (1, 4))"]  # a default, in the link all the same
    back = opened("sharding", **{k: v if len(v) > 1 else v[0] for k, v in q.items()})
    assert notices(back) == [] and back.number_input(key="mlp_N").value == 8
    from simulator import SCHEDULES

    q = copy_link(opened("pipelines"))
    assert q["schedules"] == list(SCHEDULES) and q["p"] == ["4"]  # every schedule, the default
