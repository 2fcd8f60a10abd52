"""The event clock and the program walk as they were before the fast path (commit 177f8a9),
frozen verbatim so tests/test_clock_equivalence.py and bench/bench_clock.py can compare the
fast implementation with them on the same programs. Do not optimise this file."""

from __future__ import annotations

from collections import defaultdict, deque

from simulator.cost.clock import plan_of, plan_time_s
from simulator.errors import ProgramError
from simulator.program import Collective, Compute, Event, Free, Program, Recv, Send, no_gc
from simulator.trace import MemorySample, Trace, TraceEvent


def reference_walk(prog: Program) -> list[Event]:  # noqa: C901 -- frozen copy
    n, code = prog.n_devices, prog.code
    pcs = [0] * n
    events: list[Event] = []
    mailbox: dict[tuple, deque] = defaultdict(deque)  # (src, dst, tag) -> Send positions
    waiting_recv: dict[tuple, int] = {}
    posted: dict[tuple, dict[int, int]] = defaultdict(dict)  # (group, seq) -> {rank: index}
    seq: dict[tuple, int] = defaultdict(int)  # (rank, group) -> collectives issued so far
    pending: list[dict[str, tuple]] = [dict() for _ in range(n)]  # rank -> tensor -> open collective
    waiters: dict[tuple, set[int]] = defaultdict(set)  # open collective -> ranks waiting on it
    queue = deque(range(n))

    def complete(ckey: tuple) -> None:
        members = posted.pop(ckey)
        group = ckey[0]
        events.append(Event("collective", tuple((r, members[r]) for r in group)))
        for r in group:
            for t in [t for t, k in pending[r].items() if k == ckey]:
                del pending[r][t]
        queue.extend(waiters.pop(ckey, ()))

    local_types = (Compute, Free)
    while queue:
        r = queue.popleft()
        rcode, pend = code[r], pending[r]
        pc, end = pcs[r], len(code[r])
        while pc < end:
            ins = rcode[pc]
            kind = type(ins)
            if pend:
                blocked_on = next((pend[t] for t in ins.touches() if t in pend), None)
                if blocked_on is not None:
                    waiters[blocked_on].add(r)
                    break
            if kind in local_types:
                events.append(Event("local", ((r, pc),)))
            elif kind is Send:
                if not 0 <= ins.dst < n or ins.dst == r:
                    raise ProgramError(f"{prog.describe(r, pc)} sends to invalid device {ins.dst}")
                key = (r, ins.dst, ins.tag)
                events.append(Event("send", ((r, pc),)))
                mailbox[key].append((r, pc))
                if key in waiting_recv:
                    queue.append(waiting_recv.pop(key))
            elif kind is Recv:
                key = (ins.src, r, ins.tag)
                box = mailbox.get(key)
                if not box:
                    waiting_recv[key] = r
                    break
                events.append(Event("recv", ((r, pc), box.popleft())))
            elif kind is Collective:
                if r not in ins.group:
                    raise ProgramError(f"{prog.describe(r, pc)} is issued by a device outside its group")
                ckey = (ins.group, seq[(r, ins.group)])
                seq[(r, ins.group)] += 1
                members = posted[ckey]
                if members:
                    r0, i0 = next(iter(members.items()))
                    if code[r0][i0].signature() != ins.signature():
                        raise ProgramError(
                            f"mismatched collectives: {prog.describe(r0, i0)} meets {prog.describe(r, pc)}")
                members[r] = pc
                pc += 1
                if len(members) == len(ins.group):
                    pcs[r] = pc
                    complete(ckey)
                elif ins.blocking:
                    waiters[ckey].add(r)
                    break
                else:
                    pend[ins.tensor] = ckey
                    pend[ins.out] = ckey
                continue
            else:
                raise ProgramError(f"device {r} instruction #{pc} is not an instruction: {ins!r}")
            pc += 1
        pcs[r] = pc
    # a collective that some members never issue leaves the others waiting on it
    in_collective: dict[int, list[str]] = defaultdict(list)
    for (group, _), members in posted.items():
        missing = [m for m in group if m not in members]
        for r, i in members.items():
            in_collective[r].append(f"{prog.describe(r, i)} waits for device(s) {missing}, which never reach it")
    stuck = sorted({r for r in range(n) if pcs[r] < len(code[r]) or pending[r]} | set(in_collective))
    if stuck:
        waits = "; ".join("; ".join(in_collective[r]) if r in in_collective else
                          prog.describe(r, min(pcs[r], len(code[r]) - 1)) + " waits" for r in stuck)
        raise ProgramError(f"deadlock: {len(stuck)} device(s) can never finish: {waits}")
    unreceived = [pos for q in mailbox.values() for pos in q]
    if unreceived:
        r, i = unreceived[0]
        raise ProgramError(f"{prog.describe(r, i)} is never received ({len(unreceived)} unmatched send(s))")
    return events


def reference_simulate(program: Program, model, step: int = 0, memory=None, name: str = "") -> Trace:
    """clock.simulate without collective_steps, on the frozen walk and clock."""
    with no_gc():
        return _reference_simulate(program, model, step, memory, name)


def _reference_simulate(program: Program, model, step: int, memory, name: str) -> Trace:  # noqa: C901 -- frozen copy
    code = program.code
    n = program.n_devices
    t_comp = [0.0] * n
    t_comm = [0.0] * n
    t_async = [0.0] * n   # the stream of non-blocking collectives
    ready: list[dict[str, float]] = [dict() for _ in range(n)]
    sent_at: dict[tuple[int, int], float] = {}
    end_of: dict[tuple[int, int], float] = {}
    events: list[TraceEvent] = []
    add = events.append
    plans: dict[tuple, tuple[float, list[int]]] = {}
    price = getattr(model, "price_collective", None)
    compute_time = model.compute_time_s
    keep_ends = bool(memory)
    flow_id = 0
    for ev in reference_walk(program):
        kind = ev.kind
        if kind == "local":
            r, i = ev.at[0]
            ins = code[r][i]
            if type(ins) is Free:
                if keep_ends:
                    end_of[(r, i)] = t_comp[r]
                continue
            rd = ready[r]
            start = t_comp[r]
            for x in ins.inputs:
                tx = rd.get(x, 0.0)
                if tx > start:
                    start = tx
            dur = compute_time(ins)
            end = t_comp[r] = start + dur
            for x in ins.outputs:
                rd[x] = end
            if keep_ends:
                end_of[(r, i)] = end
            add(TraceEvent(r, "compute", ins.label or ins.op, start, dur, ins.phase, ins.op,
                           ins.nbytes, ins.flops, ins.microbatch, step))
        elif kind == "send":
            r, i = ev.at[0]
            ins = code[r][i]
            lat, bw = model.link(r, ins.dst)
            s0 = max(ready[r].get(ins.tensor, 0.0), t_comm[r])
            sent_at[(r, i)] = s0
            t_comm[r] = s0 + lat + ins.nbytes / bw       # the sender's lane, in its program order
        elif kind == "recv":
            (dst, j), (src, i) = ev.at
            send, recv = code[src][i], code[dst][j]
            lat, bw = model.link(src, dst)
            start = max(sent_at.pop((src, i)), t_comm[dst])
            dur = lat + send.nbytes / bw
            end = t_comm[dst] = ready[dst][recv.tensor] = start + dur
            if keep_ends:
                end_of[(src, i)] = end_of[(dst, j)] = end
            flow_id += 1
            add(TraceEvent(src, "comm", f"send {send.tensor} to {dst}", start, dur, "comm", "send", send.nbytes,
                           0.0, send.microbatch, step, flow_id))
            add(TraceEvent(dst, "comm", f"recv {send.tensor} from {src}", start, dur, "comm", "recv", send.nbytes,
                           0.0, send.microbatch, step, flow_id))
        else:  # collective
            at = ev.at
            ins0: Collective = code[at[0][0]][at[0][1]]
            group = ins0.group
            blocking = ins0.blocking
            start = 0.0
            lane = t_comm if blocking else t_async
            for r, i in at:
                x = max(ready[r].get(code[r][i].tensor, 0.0), lane[r], t_comp[r] if blocking else 0.0)
                if x > start:
                    start = x
            key = (ins0.kind, ins0.algo, group, ins0.nbytes, ins0.tag)
            got = plans.get(key)
            if got is None:
                priced = price(ins0) if price is not None else None
                if priced is not None:
                    got = (priced[0], [priced[1]] * len(group))
                else:
                    plan = plan_of(ins0)
                    got = (plan_time_s(plan, group, model), plan.bytes_sent_per_rank())
                plans[key] = got
            dur, sent = got
            end = start + dur
            for g, (r, i) in enumerate(at):
                ins = code[r][i]
                lane[r] = ready[r][ins.out] = end
                if keep_ends:
                    end_of[(r, i)] = end
                if ins.blocking and t_comp[r] < end:
                    t_comp[r] = end
                add(TraceEvent(r, "comm", ins.label, start, dur, ins.phase, ins.kind,
                               sent[g], 0.0, ins.microbatch, step, group=ins.group))
    trace = Trace(program.n_devices, events, name=name or program.name)
    if memory:
        trace.memory = sorted((MemorySample(r, end_of.get((r, i), 0.0), dict(b), step)
                               for (r, i), b in memory.items()), key=lambda s: (s.time_s, s.device))
    return trace
