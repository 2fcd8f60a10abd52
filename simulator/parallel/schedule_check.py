"""Dependency validation of pipeline schedules, the in-order execution engine they share, and the
text form of hand-written schedules (parse_schedule / format_schedule).

Rules (model stage k = the schedule's stage_map[device][chunk]; S = p*v model stages; micro-batch i):
  - every (i, k) has exactly one F, and one backward: a BW, or a B and a W (never both forms);
  - F(i, k) needs F(i, k-1)                      (activation from the previous stage);
  - B/BW(i, k) needs F(i, k) and B/BW(i, k+1)     (its own activations, the next stage's gradient);
  - W(i, k) needs B(i, k)                         (the weight gradient uses the output gradient).
Each device runs its list strictly in order and waits at an action until its dependencies are
done. A schedule is valid if this execution finishes; otherwise the first stuck action is named.
The engine is a ready-queue of devices: a device runs until it blocks on a missing result and is
re-queued when exactly that result is produced, so the cost is O(actions), not O(actions x p).
"""

from __future__ import annotations

from collections import deque

import numpy as np

from simulator.errors import ParasimError, ProgramError
from simulator.parallel.schedules import KINDS, PHASES, PLACEMENTS, Action, Schedule, infer_phases, stage_placement

_FWD, _GRAD = 0, 1  # result kinds: activation produced by F, input gradient produced by B or BW


_CODES = {"F": 0, "B": 1, "W": 2, "BW": 3}


def action_arrays(schedule: Schedule):
    """Flat int arrays over all actions: kind code, model stage, micro-batch, device; and the
    offset of each device's list. Shapes (n_actions,), offsets (p + 1,)."""
    p, codes = schedule.p, _CODES
    kind = [codes[a.kind] for row in schedule.actions for a in row]
    stage = [schedule.model_stage(d, a.chunk) for d, row in enumerate(schedule.actions) for a in row]
    mb = [a.microbatch for row in schedule.actions for a in row]
    lengths = [len(row) for row in schedule.actions]
    dev = np.repeat(np.arange(p), lengths)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(int)
    return np.array(kind, dtype=np.int64), np.array(stage, dtype=np.int64), np.array(mb, dtype=np.int64), dev, offsets


def check_counts(schedule: Schedule, arrays=None) -> None:
    """Every micro-batch: exactly one F and one backward (BW, or B and W) per model stage."""
    m, S = schedule.m, schedule.n_stages
    kind, stage, mb, _, _ = arrays if arrays is not None else action_arrays(schedule)
    counts = np.bincount((kind * S + stage) * m + mb, minlength=4 * S * m).reshape(4, S, m)
    nf, nb, nw, nbw = counts  # each (S, m)
    bad = (nf != 1) | ((nbw > 0) & ((nb + nw) > 0)) | (nbw > 1) | (nb > 1) | (nw > 1) | ((nbw + nb) == 0) | (nb != nw)
    if not bad.any():
        return
    k, i = (int(x) for x in np.argwhere(bad)[0])
    d, c = schedule.stage_devices[k], schedule.chunk_of(k)
    where = f"stage {d}" + (f" chunk {c} (model stage {k})" if schedule.v > 1 else "")
    name = f"{i}.{c}" if c else f"{i}"
    f_, b_, w_, bw_ = (int(x[k, i]) for x in (nf, nb, nw, nbw))
    if f_ == 0:
        raise ParasimError(f"{where} never runs F{name}; each micro-batch needs exactly one forward per stage")
    if f_ != 1:
        raise ParasimError(f"{where} runs F{name} {f_} times; each micro-batch needs exactly one forward per stage")
    if bw_ and (b_ or w_):
        raise ParasimError(f"{where} runs both BW{name} and a split B/W for micro-batch {i}; use one form")
    if bw_ > 1 or b_ > 1 or w_ > 1:
        raise ParasimError(f"{where} runs the backward of micro-batch {i} more than once (BW x{bw_}, B x{b_}, W x{w_})")
    if bw_ == 0 and b_ == 0 and w_ == 0:
        raise ParasimError(f"{where} never runs the backward of micro-batch {i} (no BW{name} or B{name})")
    missing, present = ("W", "B") if b_ else ("B", "W")
    raise ParasimError(f"{where} runs {present}{name} but no {missing}{name}; a split backward needs both")


def _describe(schedule: Schedule, d: int, action, dep_key: int) -> str:
    m, S, v = schedule.m, schedule.n_stages, schedule.v
    what, rest = divmod(dep_key, S * m)
    k, i = divmod(rest, m)
    dd, c = schedule.stage_devices[k], schedule.chunk_of(k)
    name = f"{i}.{c}" if c else f"{i}"
    if dd == d:
        own = ("F" if what == _FWD else "B") + name
        later = any(repr(a) == own or (what == _GRAD and repr(a) == "BW" + name) for a in schedule.actions[d])
        tail = " (it comes later in its own list)" if later else f" (stage {d} never runs it)"
        return f"stage {d} runs {action!r} before its own {own}{tail}"
    product = "activation" if what == _FWD else "gradient"
    chunk = f" in chunk {c}" if v > 1 else ""
    return f"stage {d} runs {action!r} before stage {dd} has produced its {product} for micro-batch {i}{chunk}"


def execute(schedule: Schedule, durations: dict, t_comm: float = 0.0, arrays=None):
    """Run every device's list in order, each action starting when its device is free and its
    inputs have arrived (+ t_comm when they come from another device).

    durations: {"F": t, "B": t, "W": t, "BW": t}, each t one number or a sequence of one per model
    stage. Returns (starts, ends): flat float arrays over
    all actions in device order (device d owns offsets[d]:offsets[d+1] of `action_arrays`). Raises ProgramError (a ParasimError) naming the stuck dependency on deadlock.
    """
    p, m, S = schedule.p, schedule.m, schedule.n_stages
    kind, stage, mb, dev, offsets = arrays if arrays is not None else action_arrays(schedule)
    # result keys: activation of (k, i) -> k*m + i; input gradient -> (S + k)*m + i;
    # NONE is a slot that always reads 0.0 (no dependency), SINK takes W's (nobody reads it).
    NONE, SINK = 2 * S * m, 2 * S * m + 1
    is_f, is_w = kind == 0, kind == 2
    is_b = ~is_f & ~is_w
    fwd_prev = np.where(stage > 0, (stage - 1) * m + mb, NONE)
    grad_next = np.where(stage < S - 1, (S + stage + 1) * m + mb, NONE)
    dep1 = np.where(is_f, fwd_prev, np.where(is_b, stage * m + mb, (S + stage) * m + mb))
    dep2 = np.where(is_b, grad_next, NONE)
    bi = schedule.bidirectional  # neighbouring stages of a DualPipe copy are always on other devices
    on = np.array(schedule.stage_devices + (-1,), dtype=np.int64)  # stage -> device; index -1 / S: none
    comm1 = np.where(is_f & (stage > 0) & (bi | (on[stage - 1] != dev)), t_comm, 0.0)
    comm2 = np.where(is_b & (stage < S - 1) & (bi | (on[np.minimum(stage + 1, S)] != dev)), t_comm, 0.0)
    produced = np.where(is_f, stage * m + mb, np.where(is_b, (S + stage) * m + mb, SINK))
    # each kind's time: one number, or one per model stage (stages of unequal work)
    dur = np.array([np.broadcast_to(np.asarray(durations[k], dtype=float), (S,)) for k in ("F", "B", "W", "BW")])
    dur = dur[kind, stage]
    # one tuple per action, in device order: (dep1, dep2, comm1, comm2, produced, duration)
    acts = list(zip(*(x.tolist() for x in (dep1, dep2, comm1, comm2, produced, dur))))

    done = [-1.0] * (2 * S * m) + [0.0, 0.0]  # end time of each result, -1 = not yet
    end_of = [0.0] * len(acts)  # end time of each action (flat index)
    off = offsets.tolist()
    pos, stop = off[:-1], off[1:]
    free = [0.0] * p
    waiting = {}  # result key -> devices blocked on it
    queue = deque(range(p))
    while queue:
        d = queue.popleft()
        i, n, t = pos[d], stop[d], free[d]
        while i < n:
            d1, d2, c1, c2, key, du = acts[i]
            a = done[d1]
            if a < 0:
                waiting.setdefault(d1, []).append(d)
                break
            b = done[d2]
            if b < 0:
                waiting.setdefault(d2, []).append(d)
                break
            a += c1
            b += c2
            if a > t:
                t = a
            if b > t:
                t = b
            t += du
            end_of[i] = t
            done[key] = t
            if key in waiting:
                queue.extend(waiting.pop(key))
            i += 1
        pos[d], free[d] = i, t
    stuck = [d for d in range(p) if pos[d] < stop[d]]
    if stuck:
        reasons = {}
        for key, devs in waiting.items():
            for d in devs:
                reasons[d] = _describe(schedule, d, schedule.actions[d][pos[d] - off[d]], key)
        own = [reasons[d] for d in stuck if "its own" in reasons[d]]
        if own:
            raise ProgramError(own[0])
        listed = "; ".join(reasons[d] for d in stuck[:4]) + ("; ..." if len(stuck) > 4 else "")
        raise ProgramError(f"deadlock: {listed}")
    ends = np.array(end_of)
    return ends - dur, ends


def validate(schedule: Schedule) -> None:
    """Raise ParasimError naming the first broken rule; return None for a valid schedule."""
    arrays = action_arrays(schedule)
    check_counts(schedule, arrays)
    execute(schedule, {"F": 1.0, "B": 1.0, "W": 1.0, "BW": 2.0}, arrays=arrays)


# ---------------------------------------------------------------- text form

def format_schedule(schedule: Schedule, phases: bool = False) -> str:
    """One line per device, e.g. "F0 F1 B0.1"; with phases=True "warmup | steady | cooldown".
    A placement other than the loop one comes first as a "placement:" line (parse_schedule reads it)."""
    lines = []
    if schedule.placement_line:
        lines.append(schedule.placement_line)
    for row in schedule.actions:
        if not phases:
            lines.append(" ".join(map(repr, row)))
            continue
        parts = [" ".join(repr(a) for a in row if a.phase == ph) for ph in PHASES]
        lines.append(" | ".join(parts).strip())
    return "\n".join(lines)


def _parse_token(tok: str, line_no: int) -> tuple:
    kind = tok.rstrip("0123456789.")
    body = tok[len(kind):]
    mb, _, chunk = body.partition(".")
    if kind not in KINDS or not mb.isdigit() or (chunk and not chunk.isdigit()) or body.count(".") > 1:
        raise ParasimError(f"line {line_no}: cannot read action {tok!r}; write F3, B3, W3, BW3 or F3.1")
    return kind, int(mb), int(chunk or 0)


def _parse_placement(body: str, line_no: int, v: int):
    """"v", "loop", or the model stages of each device's chunks: "0 7, 1 6, 2 5, 3 4"."""
    body = body.strip()
    if body in PLACEMENTS:
        return body
    rows = [seg.split() for seg in body.split(",")]
    if not all(rows) or not all(t.isdigit() for row in rows for t in row) or any(len(r) != v for r in rows):
        raise ParasimError(f"line {line_no}: write 'placement: {' or '.join(PLACEMENTS)}' or one group of v={v} "
                           f"model stages per device separated by commas (e.g. 'placement: 0 3, 1 2'), not {body!r}")
    return tuple(tuple(int(t) for t in row) for row in rows)


def parse_schedule(text: str, v: int = 1, name: str = "custom") -> Schedule:
    """Read a hand-written schedule: one line per device, actions separated by spaces.

    Blank lines and text after '#' are ignored. m is inferred as 1 + the largest micro-batch. A line
    may carry two '|' marks splitting warmup | steady | cooldown; otherwise phases are inferred
    (forwards before the first backward: warmup; after the last forward: cooldown). A line
    "placement: v" (V-shaped: chunk 1 of device d is model stage 2p-1-d), "placement: loop" (the
    default, c*p + d) or "placement: 0 3, 1 2" (each device's chunks' model stages) places the stages.
    """
    rows, placement = [], "loop"
    for line_no, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith("placement:"):
            placement = _parse_placement(line[len("placement:"):], line_no, v)
            continue
        bars = line.count("|")
        if bars not in (0, 2):
            raise ParasimError(f"line {line_no}: use no '|' or exactly two (warmup | steady | cooldown), found {bars}")
        if bars == 0:
            rows.append(("infer", [_parse_token(t, line_no) for t in line.split()]))
        else:
            segs = [[_parse_token(t, line_no) for t in seg.split()] for seg in line.split("|")]
            rows.append(("given", segs))
    if not rows:
        raise ParasimError("schedule text has no stage lines")
    all_mbs = [a[1] for how, r in rows for a in (r if how == "infer" else sum(r, []))]
    m = 1 + max(all_mbs, default=0)
    actions = []
    for how, r in rows:
        if how == "infer":
            actions.append(infer_phases(r))
        else:
            actions.append(tuple(Action(k, mb, c, ph) for ph, seg in zip(PHASES, r) for k, mb, c in seg))
    p = len(actions)
    smap = stage_placement(placement, p, v) if isinstance(placement, str) else placement
    return Schedule(name, p, m, v, tuple(actions), stage_map=smap)
