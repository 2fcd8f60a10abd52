"""The configuration vocabulary (simulator/vocabulary.py): one name and default per knob, shared by
TrainConfig, ParallelConfig, Assumptions, the CLI and sweep; older spellings as deprecated aliases
routed through the one mapping; docs/configuration.md is the table."""

import warnings
from dataclasses import MISSING, fields, replace
from pathlib import Path

import pytest

from simulator import Assumptions, ParallelConfig, ParasimError, TrainConfig, get_model, sweep
from simulator.models import GPTConfig
from simulator.parallel.degrees import Parallelism
from simulator.vocabulary import (
    ALIASES,
    BY_NAME,
    DEFAULTS,
    KNOBS,
    PRESET,
    TRAIN_DEFAULTS,
    canonical_value,
    markdown_table,
)

DOC = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"
GPT = GPTConfig(layers=2, hidden=16, heads=2, seq_len=8, vocab=16)


def _field_defaults(cls) -> dict:
    return {f.name: f.default for f in fields(cls) if f.default is not MISSING}


def test_the_documented_table_is_the_vocabulary():
    assert markdown_table() in DOC.read_text(encoding="utf-8"), \
        "docs/configuration.md: replace the table by simulator.vocabulary.markdown_table()"
    assert len({k.name for k in KNOBS}) == len(KNOBS)
    assert not set(ALIASES) & set(BY_NAME), "an older spelling must not be a knob's name"


def test_every_configuration_takes_its_defaults_from_the_table():
    cost = _field_defaults(ParallelConfig)
    for name, value in cost.items():
        if name in DEFAULTS and DEFAULTS[name] not in ("derived",):
            assert value == DEFAULTS[name], name
    run = _field_defaults(TrainConfig)
    for name, value in run.items():
        if name in TRAIN_DEFAULTS:
            assert value == TRAIN_DEFAULTS[name], name
    stack = _field_defaults(Assumptions)
    for name, value in stack.items():
        want = None if DEFAULTS[name] == PRESET else DEFAULTS[name]
        assert value == want, name
    assert set(stack) == {k.name for k in KNOBS if k.used_by == "stack"}


def test_older_spellings_are_aliases_of_one_mapping():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        old = TrainConfig(GPT, strategy="cp", devices=2, cp=2, cp_kind="all-to-all", batch_size=4, zero=0)
        assert old == TrainConfig(GPT, strategy="cp", devices=2, cp=2, cp_comm_type="a2a", global_batch=4)
        assert (old.cp_kind, old.batch_size, old.zero) == ("all-to-all", 4, 0)     # read back in old terms
        assert ParallelConfig(dp=2, zero=1, batch_size=8) == ParallelConfig(dp=2, zero_stage=1, global_batch=8)
        assert Parallelism(dp=2, zero=1) == Parallelism(dp=2, zero_stage=1)
    with pytest.warns(DeprecationWarning, match="zero_stage"):
        TrainConfig(GPT, zero=0)
    with pytest.raises(ParasimError, match="name the same setting"):
        TrainConfig(GPT, zero=1, zero_stage=1)
    assert canonical_value("cp_comm_type", "ring") == "p2p"
    assert GPTConfig(layers=2, hidden=16, heads=2, seq=8, vocab=16) == GPT and GPT.seq == 8
    assert get_model("llama3-8b", seq_len=4096) == get_model("llama3-8b", seq=4096) == get_model("llama3-8b",
                                                                                                 seq_length=4096)


def test_a_runs_json_and_a_sweep_use_the_vocabulary():
    from simulator import train

    d = train(TrainConfig(GPT, strategy="dp", devices=2, zero_stage=1, global_batch=4)).to_dict()
    assert d["zero_stage"] == 1 and "zero" not in d
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        t = sweep("estimate", ParallelConfig(dp=2, global_batch=16), {"model": "gpt3-125m", "hardware": "a100-80gb"},
                  zero=[0, 1])
    new = sweep("estimate", ParallelConfig(dp=2, global_batch=16), {"model": "gpt3-125m", "hardware": "a100-80gb"},
                zero_stage=[0, 1])
    assert [r["step_time_s"] for r in t.records] == [r["step_time_s"] for r in new.records]
    assert t.records[1]["memory.model_state_bytes"] < t.records[0]["memory.model_state_bytes"]


def test_old_checkpoint_spellings_are_read_not_dropped():
    from simulator.faults.shards import config_from_json, config_to_json

    cfg = TrainConfig(GPT, strategy="dp", devices=2, zero_stage=2, global_batch=4, cp_comm_type="a2a")
    d = config_to_json(cfg)
    old = {("zero" if k == "zero_stage" else "batch_size" if k == "global_batch" else
            "cp_kind" if k == "cp_comm_type" else k): v for k, v in d.items()}
    old["cp_kind"] = "all-to-all"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        assert config_from_json(old) == cfg == config_from_json(d)
    assert replace(cfg, zero_stage=1).zero_stage == 1


def test_no_door_a_learner_reads_spells_a_configuration_the_old_way():
    """The app, the lessons (exercises, solutions, checks, READMEs), the docs and the library build
    TrainConfig / ParallelConfig with the vocabulary's names only: the older spellings are accepted
    from users (with a DeprecationWarning), never taught."""
    import ast
    import re

    from simulator.vocabulary import ALIASES

    root = Path(__file__).resolve().parent.parent
    calls = ("TrainConfig", "ParallelConfig")
    found = []
    for folder in ("app", "lessons", "instructor", "simulator", "docs", "bench"):
        for path in sorted((root / folder).rglob("*.py")):
            if path.name == "vocabulary.py":
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) in calls:
                    found += [f"{path.relative_to(root)}:{node.lineno} {k.arg}=" for k in node.keywords if k.arg in ALIASES]
    spelled = re.compile(r"\b(?:%s)\(([^)]*)" % "|".join(calls))
    for path in [root / "README.md", *sorted((root / "docs").rglob("*.md")), *sorted((root / "lessons").rglob("*.md"))]:
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            inner = re.compile(r"\b(?!(?:%s)\()\w+\([^()]*\)" % "|".join(calls))   # a model's own fields
            while inner.search(line):
                line = inner.sub("", line)
            for args in spelled.findall(line):
                found += [f"{path.relative_to(root)}:{n} {a}=" for a in re.findall(r"\b(\w+)=", args) if a in ALIASES]
    assert found == [], found
    assert "batch_size" in ALIASES and "cp_kind" in ALIASES     # what the scan looks for
