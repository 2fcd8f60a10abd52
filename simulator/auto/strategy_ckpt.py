"""Strategy checkpoints: strategy_ckpt_save_file / strategy_ckpt_load_file as readable JSON.

MindSpore (docs "strategy_select" / "save_load"; `set_auto_parallel_context(
strategy_ckpt_save_file=..., strategy_ckpt_load_file=...)`) writes, when a network is compiled,
every operator's strategy and every parameter's layout (device matrix, tensor map, slice shape,
optimizer shard), and reads them back so a later compile uses the same strategies. MindSpore's
file is protobuf (or JSON in newer releases); parasim's is JSON:

    {"format": "parasim-strategy-ckpt", "version": 1, "network": "mlp", "device_num": 8,
     "parallel_mode": "auto_parallel",
     "operators": {"MatMul-0": {"op": "MatMul", "in_strategy": [[2, 1], [1, 4]],
                                "out_strategy": null, "device_matrix": [2, 1, 4],
                                "tensor_maps": [[2, -1], [-1, 0]]}, ...},
     "parameters": {"w1": {"shape": [8, 12], "dev_matrix": [2, 1, 4], "tensor_map": [-1, 0],
                           "param_split_shape": [8, 3], "opt_weight_shard_size": 1}, ...}}

"device_num" is the devices of one pipeline stage (all of them without pipelining).
A strategy given as a Layout is saved as {"device_matrix", "alias_name", "tensor_map"}.
Loading reads JSON only (json.loads, no code), checks every field's type, gives every operator
named in the file its saved strategy (as if set by shard()), plans, and refuses a plan whose
parameter layouts differ from the file's. Reshape follows its producer and is not saved.
"""

from __future__ import annotations

import copy
import json
from dataclasses import replace
from pathlib import Path

from ..errors import ParasimError
from .graph import Network
from .ops import Reshape
from .strategy import MsLayout, TensorLayout

FORMAT, VERSION = "parasim-strategy-ckpt", 1


def _strategy_json(strategy):
    if strategy is None:
        return None
    out = []
    for s in strategy:
        if isinstance(s, TensorLayout):
            out.append({"device_matrix": list(s.layout.device_matrix),
                        "alias_name": list(s.layout.alias_name),
                        "tensor_map": [list(d) for d in s.dims]})
        else:
            out.append([int(v) for v in s])
    return out


def strategy_document(plans) -> dict:
    """The checkpoint of one or more stage plans (a pipeline saves all its stages)."""
    plans = list(plans)
    first = plans[0]
    ops, params = {}, {}
    for plan in plans:
        for np_ in plan.nodes:
            s = np_.sharding
            if isinstance(np_.node.op, Reshape) or s.given is None:
                continue
            ops[np_.node.label] = {"op": np_.node.op.name, "in_strategy": _strategy_json(s.given),
                                   "out_strategy": _strategy_json(s.given_out),
                                   "device_matrix": list(s.device_matrix),
                                   "tensor_maps": [[list(e) if isinstance(e, tuple) else e for e in m]
                                                   for m in s.tensor_maps]}
        for x, t in plan.net.tensors.items():
            if t.kind == "parameter" and x in plan.stored:
                params[x] = parameter_entry(plan, x)
    return {"format": FORMAT, "version": VERSION, "network": first.net.name,
            "device_num": first.ctx.device_num, "parallel_mode": first.ctx.parallel_mode,
            "operators": ops, "parameters": params}


def parameter_entry(plan, x: str) -> dict:
    lay = plan.gathered.get(x, plan.stored[x])
    matrix, tmap = lay.to_tensor_map()
    shape = plan.net.tensors[x].shape
    opt = prod_int(plan.stored[x].splits) // prod_int(lay.splits)
    return {"shape": list(shape), "dev_matrix": list(matrix),
            "tensor_map": [list(e) if isinstance(e, tuple) else e for e in tmap],
            "param_split_shape": list(lay.local_shape(shape)), "opt_weight_shard_size": opt}


def prod_int(xs) -> int:
    out = 1
    for v in xs:
        out *= int(v)
    return out


def save_strategy(plans, path: str) -> None:
    try:
        Path(path).write_text(json.dumps(strategy_document(plans), indent=1))
    except OSError as e:
        raise ParasimError(f"strategy_ckpt_save_file {path!r} cannot be written: {e.strerror}") from None


def read_strategy(path: str) -> dict:
    """The checkpoint at `path`, every field type-checked (one line naming what is wrong)."""
    where = f"strategy_ckpt_load_file {path!r}"
    try:
        doc = json.loads(Path(path).read_text())
    except OSError as e:
        raise ParasimError(f"{where} cannot be read: {e.strerror}") from None
    except ValueError as e:
        raise ParasimError(f"{where} is not JSON: {e}") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or doc.get("version") != VERSION:
        raise ParasimError(f"{where} is not a parasim strategy checkpoint (format {FORMAT!r}, "
                           f"version {VERSION})")
    ops = doc.get("operators")
    if not isinstance(ops, dict) or not isinstance(doc.get("parameters"), dict):
        raise ParasimError(f"{where}: 'operators' and 'parameters' must be objects")
    for label, e in ops.items():
        if not isinstance(e, dict) or not isinstance(e.get("op"), str):
            raise ParasimError(f"{where}: operator {label!r} needs an object with a string 'op'")
        _check_strategy(where, label, "in_strategy", e.get("in_strategy"), allow_none=False)
        _check_strategy(where, label, "out_strategy", e.get("out_strategy"), allow_none=True)
    return doc


def _check_strategy(where, label, key, value, allow_none) -> None:
    if value is None and allow_none:
        return
    ok = isinstance(value, list) and all(
        (isinstance(s, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in s))
        or (isinstance(s, dict) and set(s) == {"device_matrix", "alias_name", "tensor_map"})
        for s in value)
    if not ok:
        raise ParasimError(f"{where}: operator {label!r} {key} must be a list of integer lists or "
                           f"layouts, got {value!r}")


def _strategy_value(s):
    if isinstance(s, dict):
        layout = MsLayout(s["device_matrix"], s["alias_name"])
        return layout(*[tuple(d) if d else "None" for d in s["tensor_map"]])
    return tuple(s)


def apply_strategy(net: Network, doc: dict, path: str, device_num: int) -> Network:
    """A copy of `net` whose operators named in `doc` carry the saved strategies."""
    where = f"strategy_ckpt_load_file {path!r}"
    if doc.get("device_num") != device_num:
        raise ParasimError(f"{where} was saved for device_num {doc.get('device_num')!r} (per "
                           f"pipeline stage), but this plan has {device_num}")
    by_label = {n.label: n for n in net.nodes}
    new = copy.copy(net)
    new.nodes = list(net.nodes)
    for label, e in doc["operators"].items():
        node = by_label.get(label)
        if node is None:
            continue  # another pipeline stage's operator
        if node.op.name != e["op"]:
            raise ParasimError(f"{where}: operator {label!r} is a {e['op']} in the file but a "
                               f"{node.op.name} in network {net.name!r}")
        op = copy.copy(node.op)
        op.in_strategy = tuple(_strategy_value(s) for s in e["in_strategy"])
        op.out_strategy = (None if e["out_strategy"] is None
                           else tuple(_strategy_value(s) for s in e["out_strategy"]))
        new.nodes[node.index] = replace(node, op=op)
    return new


def check_parameters(plan, doc: dict, path: str) -> None:
    """Refuse a loaded plan whose parameter layouts differ from the checkpoint's."""
    for x, want in doc["parameters"].items():
        if x in plan.stored and plan.net.tensors[x].kind == "parameter":
            have = parameter_entry(plan, x)
            if have != want:
                raise ParasimError(f"strategy_ckpt_load_file {path!r}: parameter {x!r} is planned as "
                                   f"{have} but the file has {want}")
