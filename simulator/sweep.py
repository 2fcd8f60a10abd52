"""Sweeps: run one experiment over a grid of values and get a table, one record per point.

    from simulator import sweep
    t = sweep("schedule", {"p": 4, "t_b": 2.0}, schedule=["gpipe", "1f1b"], m=[2, 4, 8, 16])
    t.to_frame()                        # pandas DataFrame: the inputs, the outputs, an `error` column
    t.plot("bubble_fraction", x="m", line="schedule")

`sweep(kind, base, **vary)` runs every combination of the `vary` values (cartesian product, in
the order given) on top of `base`, and records the point's inputs, its outputs (the result's
`to_dict()`, numbers and texts kept, nested tables flattened as `a.b`) or the one-line error that
refused it (a `ParasimError`, e.g. a batch that the micro-batches cannot divide). Kinds:

- "train": `base` is a TrainConfig; each point is a real emulated run (`train(..., check=False)`);
  `runner_kwargs` go to `train` (e.g. `device_model=`).
- "estimate": the closed-form cost model; `base` is a ParallelConfig; `model` and `hardware` (and
  Assumptions fields such as `overlap_grad_reduce`) may be given in `base_kwargs` or varied.
- "search": `search_training`, the search `parasim search` runs; `base` is a dict of its
  arguments (model, hardware, gpus, global_batch, ...); the outputs are the fastest configuration
  that fits (t, p, d, b, ...).
- "schedule": `time_schedule(schedule, p, m, v, t_f=, t_b=, t_w=, t_comm=)` (schedule_registry; the
  app's Pipelines page times schedules the same way; times default to `DEFAULT_TIMES`); `base` is a
  dict of those names.

The estimate and search records carry `assumptions.NAME.value` / `.source`: the software stack and
recomputation they assumed and where each came from (`simulator.cost.assumptions.assumptions_of`).
Older spellings of a configuration's names (`zero`, `cp_kind`, `batch_size`) are accepted and
mapped by `simulator.vocabulary`.
"""

from __future__ import annotations

import csv
import inspect
import io
import itertools
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from .cost.analytic import estimate
from .cost.assumptions import assumptions_of
from .cost.model_presets import get_model
from .cost.parallel_config import Assumptions, ParallelConfig
from .cost.search import search_training
from .errors import ParasimError
from .parallel.config import TrainConfig
from .parallel.schedule_registry import time_schedule
from .parallel.schedule_sim import DEFAULT_TIMES
from .training import train
from .vocabulary import canonical

KINDS = ("train", "estimate", "search", "schedule")
SCHEDULE_NAMES = ("schedule", "p", "m", "v", *DEFAULT_TIMES)
# points a sweep may run: a train or search point takes seconds, an estimate or schedule point ms
MAX_POINTS = {"train": 64, "search": 64, "estimate": 10_000, "schedule": 10_000}


def flatten(d: dict, prefix: str = "") -> dict:
    """Scalars of a nested dict as `a.b` keys; lists of scalars kept as lists; other values dropped."""
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        elif v is None or isinstance(v, (bool, int, float, str)):
            out[key] = v
        elif isinstance(v, (list, tuple)) and all(x is None or isinstance(x, (bool, int, float, str)) for x in v):
            out[key] = list(v)
        elif hasattr(v, "item") and callable(v.item):  # a numpy scalar
            out[key] = v.item()
    return out


@dataclass(frozen=True)
class SweepTable:
    """The records of a sweep: `inputs` (the varied names), `records` (one dict per point:
    the varied values, then the outputs or `error`)."""

    kind: str
    inputs: tuple[str, ...]
    records: tuple[dict, ...]

    def to_dict(self) -> dict:
        """Plain data: kind, the varied names, the records (dataclasses.asdict gives the same)."""
        return {"kind": self.kind, "inputs": list(self.inputs), "records": [dict(r) for r in self.records]}

    def columns(self) -> list[str]:
        cols = list(self.inputs)
        for r in self.records:
            cols += [k for k in r if k not in cols]
        return cols

    def to_frame(self):
        """A pandas DataFrame, one row per point (pandas comes with streamlit)."""
        import pandas as pd

        return pd.DataFrame(list(self.records), columns=self.columns())

    def to_csv(self, path: str | Path | None = None) -> str:
        """CSV text (lists as JSON); written to `path` when given."""
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=self.columns())
        w.writeheader()
        for r in self.records:
            w.writerow({k: json.dumps(v) if isinstance(v, list) else ("" if v is None else v) for k, v in r.items()})
        if path is not None:
            Path(path).write_text(buf.getvalue(), encoding="utf-8")
        return buf.getvalue()

    def ok(self) -> list[dict]:
        """The records of the points that ran."""
        return [r for r in self.records if not r.get("error")]

    def plot(self, y: str, x: str, line: str | None = None, ax=None, **kwargs):
        """Metric `y` against input `x`, one line per value of `line` (a matplotlib Axes)."""
        return plot_records(self.ok(), y, x, line, ax=ax, **kwargs)


def _points(vary: dict[str, Any]) -> list[dict]:
    names = list(vary)
    return [dict(zip(names, combo)) for combo in itertools.product(*(list(vary[n]) for n in names))]


def _names(kind: str) -> tuple[set, set]:
    """(names a `kind` sweep accepts, names it needs) in its base, fixed arguments and varied values."""
    if kind == "train":
        return {f.name for f in fields(TrainConfig)} | set(TrainConfig.spellings), set()
    if kind == "estimate":
        return ({f.name for f in fields(ParallelConfig)} | set(ParallelConfig.spellings)
                | {f.name for f in fields(Assumptions)} | {"model", "hardware", "assumptions"}), {"model", "hardware"}
    if kind == "search":
        params = inspect.signature(search_training).parameters
        return set(params), {n for n, q in params.items() if q.default is inspect.Parameter.empty}
    return set(SCHEDULE_NAMES), {"schedule", "p", "m"}


def _check(kind: str, base, runner_kwargs: dict, vary: dict) -> int:
    """Refuse up front (one line) a name the kind does not know, a needed name nobody gives, or
    more points than MAX_POINTS; returns the number of points."""
    for name, values in vary.items():
        if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
            raise ParasimError(f"vary {name}=... needs a list of values, got {values!r}")
    allowed, needed = _names(kind)
    given = set(vary) | (set(base) if isinstance(base, dict) else set())
    if kind == "train":     # runner_kwargs are train()'s own arguments (device_model=, ...)
        if unknown := sorted(set(runner_kwargs) - set(inspect.signature(train).parameters) - {"cfg", "check"}):
            raise ParasimError(f"train() has no argument {unknown[0]!r}")
    else:
        given |= set(runner_kwargs)
    if unknown := sorted(given - allowed):
        raise ParasimError(f"a {kind} sweep has no input {unknown[0]!r}; known: {', '.join(sorted(allowed))}")
    if missing := sorted(needed - given):
        raise ParasimError(f"a {kind} sweep needs {', '.join(missing)} (set it or vary it)")
    n = math.prod(len(list(v)) for v in vary.values())
    if n > MAX_POINTS[kind]:
        sizes = " x ".join(str(len(list(v))) for v in vary.values())
        raise ParasimError(f"a {kind} sweep runs at most {MAX_POINTS[kind]:,} points; {sizes} = {n:,}")
    return n


def _number(a: dict, name: str, integer: bool):
    """a[name] as an int (integer) or a finite float, or one line naming the input."""
    x = a[name]
    ok = isinstance(x, int) if integer else isinstance(x, (int, float)) and math.isfinite(x)
    if isinstance(x, bool) or not ok:
        raise ParasimError(f"{name} must be {'an integer' if integer else 'a finite number'}, got {x!r}")
    return x


def _split(obj, point: dict, cls) -> tuple[Any, dict]:
    """(obj with the point's fields of `cls` replaced, the rest); older spellings mapped (vocabulary)."""
    own = {f.name for f in fields(cls)}
    mine = canonical({k: v for k, v in point.items() if k in own or k in cls.spellings}, own)
    return replace(obj, **mine), {k: v for k, v in point.items() if k not in own and k not in cls.spellings}


def _run_train(base: TrainConfig, point: dict, kwargs: dict) -> dict:
    cfg, rest = _split(base, point, TrainConfig)
    if rest:
        raise ParasimError(f"TrainConfig has no field {sorted(rest)[0]!r}")
    r = train(cfg, check=False, **kwargs)
    out = r.to_dict()
    out["messages"] = r.messages
    return out


def _run_estimate(base: ParallelConfig, point: dict, kwargs: dict) -> dict:
    cfg, rest = _split(base, point, ParallelConfig)
    call = {**kwargs, **rest}
    a_names = {f.name for f in fields(Assumptions)}
    base_a = call.pop("assumptions", Assumptions())
    if not isinstance(base_a, Assumptions):
        raise ParasimError(f"assumptions must be an Assumptions, got {base_a!r}")
    assumptions = replace(base_a, **{k: call.pop(k) for k in list(call) if k in a_names})
    model, hardware = call.pop("model", None), call.pop("hardware", None)
    if model is None or hardware is None or call:
        raise ParasimError("an estimate sweep needs model= and hardware= (and only ParallelConfig or Assumptions "
                           f"fields); unknown: {sorted(call) or 'none'}")
    model = get_model(model)
    return {**estimate(model, cfg, hardware, assumptions).to_dict(),
            "assumptions": assumptions_of(model, assumptions, cfg)}


# search_training's arguments that take several values: one value given alone is a list of one
LIST_ARGS = ("schedules", "recomputes", "micro_batch_sizes", "sequence_parallel", "zero_stages", "context_parallel",
             "expert_parallel", "stage_splits", "fsdp")


def _run_search(base: dict, point: dict, kwargs: dict) -> dict:
    args = {**base, **kwargs, **point}
    for name in LIST_ARGS:
        if name in args and (isinstance(args[name], (str, int, bool))):
            args[name] = (args[name],)
    model = get_model(args.pop("model"))
    found = search_training(model, args.pop("hardware"), args.pop("gpus"), args.pop("global_batch"),
                            **{"top": 1, **args})
    d = found.to_dict()
    return {**d["top"][0], **{k: d[k] for k in ("considered", "evaluated", "infeasible", "bounded")},
            "assumptions": assumptions_of(model, args.get("assumptions"), found.best.config, searched=True)}


def _run_schedule(base: dict, point: dict, kwargs: dict) -> dict:
    a = {**base, **kwargs, **point}
    for name in SCHEDULE_NAMES[1:]:
        if name in a:
            _number(a, name, integer=name in ("p", "m", "v"))
    times = {k: a[k] for k in DEFAULT_TIMES if k in a}
    chunks = {"v": a["v"]} if "v" in a else {}
    return time_schedule(a["schedule"], a["p"], a["m"], **chunks, **times).to_dict()


_RUNNERS: dict[str, Callable] = {"train": _run_train, "estimate": _run_estimate, "search": _run_search,
                                 "schedule": _run_schedule}


def sweep(kind: str, base, runner_kwargs: dict | None = None, progress: Callable | None = None,
          **vary) -> SweepTable:
    """Run `kind` ("train", "estimate", "search", "schedule") at every combination of `vary`'s
    values on top of `base`; one record per point: the varied values, then the outputs or `error`.
    `runner_kwargs` are fixed arguments of the run (e.g. model= and hardware= for "estimate");
    `progress(done, total, note)` is told after each point."""
    if kind not in _RUNNERS:
        raise ParasimError(f"unknown sweep kind {kind!r}; known: {', '.join(KINDS)}")
    if kind == "train" and not isinstance(base, TrainConfig):
        raise ParasimError("a train sweep starts from a TrainConfig")
    if kind == "estimate" and not isinstance(base, ParallelConfig):
        raise ParasimError("an estimate sweep starts from a ParallelConfig")
    if kind in ("search", "schedule") and not isinstance(base, dict):
        raise ParasimError(f"a {kind} sweep starts from a dict of arguments")
    if not vary:
        raise ParasimError("nothing to vary: give at least one name=[values]")
    _check(kind, base, dict(runner_kwargs or {}), vary)
    records = []
    points = list(_points(vary))
    for point in points:
        record = {k: (v.name if hasattr(v, "name") and not isinstance(v, str) else v) for k, v in point.items()}
        try:
            record.update(flatten(_RUNNERS[kind](base, point, dict(runner_kwargs or {}))))
            record["error"] = ""
        except ParasimError as e:
            record["error"] = str(e)
        records.append(record)
        if progress:
            progress(len(records), len(points), ", ".join(f"{k}={v}" for k, v in record.items() if k in vary))
    return SweepTable(kind, tuple(vary), tuple(records))


def plot_records(records: list[dict], y: str, x: str, line: str | None = None, ax=None, marker: str = "o",
                 label: str | None = None, **plot_kwargs):
    """The common sweep figure: `y` against `x`, one line per value of `line`, points in x order.
    `label` names the line (prefixed to each `line = value` when there are several); other keyword
    arguments go to matplotlib's `Axes.plot`. The user's matplotlib backend is left as chosen."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(5.5, 3.5))
    groups: dict = {}
    for r in records:
        if r.get(x) is None or r.get(y) is None:
            continue
        groups.setdefault(r.get(line) if line else y, []).append((r[x], r[y]))
    for key, pts in groups.items():
        pts.sort(key=lambda p: (p[0] is None, p[0]))
        name = f"{line} = {key}" if line else y
        if label is not None:
            name = label if len(groups) == 1 else f"{label}, {name}"
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=marker, label=name, **plot_kwargs)
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    if line or label is not None:
        ax.legend(frameon=False)
    ax.grid(alpha=0.3)
    return ax
