"""Autograder of lesson 13: online softmax, ring positions and bytes against parasim, and a real run."""

import dataclasses

import numpy as np

from simulator import (
    GPTConfig,
    TrainConfig,
    attention_bytes_per_step,
    attention_forward,
    chunk_positions,
    ring_steps,
)
from simulator.grading import (
    compare,
    each_case,
    expect,
    explanation_item,
    hidden_random,
    ok,
    own_plot_item,
    prediction_item,
    type_name,
)

LESSON = {
    "title": "Context parallelism: ring attention by hand, then the load-balanced causal split",
    "goals": ["compute causal attention one key block at a time with an online softmax",
              "say which K/V block each device holds at each ring step",
              "split a sequence into 2c chunks so every device does the same causal work",
              "predict the bytes ring attention sends per step, and check them on a real run"],
    "app_pages": ["Context parallelism", "Training playground"],
    "requires": ["attention_forward", "chunk_positions", "ring_steps", "attention_bytes_per_step", "strategy:cp"],
    "minutes": 50,
    "prerequisites": [2, 7],
    # parasim's own functions for these answers raise while your function runs
    "withhold": {"predicted_ring_bytes": ["simulator.training:train", "simulator.parallel.cp_split:attention_bytes_per_step"],
                 "why_balanced_split": ["simulator.parallel.cp_split:chunk_positions"],
                 "online_softmax_attention": ["simulator.models.attention:attention_forward"],
                 "kv_block_at": ["simulator.parallel.cp_split:ring_steps"],
                 "balanced_positions": ["simulator.parallel.cp_split:chunk_positions"],
                 "ring_bytes_per_step": ["simulator.parallel.cp_split:attention_bytes_per_step"]},
}


def check_online_softmax(s):
    "online_softmax_attention equals causal softmax attention for 1, 2, 4 and 8 blocks"
    rng = np.random.default_rng(13)
    for T, d in [(8, 4), (16, 2)]:
        q, k, v = (rng.standard_normal((T, d)) * 3 for _ in range(3))
        want = attention_forward(q[None], k[None], v[None], 1)[0][0]
        for blocks in (1, 2, 4, 8):
            got = np.asarray(s.online_softmax_attention(q, k, v, blocks))
            if got.shape != want.shape or not np.allclose(got, want, rtol=1e-9, atol=1e-12):
                return compare(want[:2].round(4).tolist(), got[:2].round(4).tolist() if got.shape == want.shape else
                               got.shape, f"T={T}, {blocks} blocks: rescale o and l by exp(m_old - m_new)")
    return ok()


def check_ring_blocks(s):
    "kv_block_at matches the ring of parasim's ring attention"
    for cp in (1, 2, 4, 8):
        for row in ring_steps(2 * cp, cp):
            got = s.kv_block_at(row["step"], row["device"], cp)
            if got != row["kv_of"]:
                return compare(row["kv_of"], got, f"cp={cp}, step {row['step']}, device {row['device']}")
    return ok()


def check_balanced_split(s):
    "balanced_positions equals chunk_positions(..., 'ring') and gives equal causal work"
    for seq, cp in [(8, 2), (16, 4), (32, 4), (16, 8)]:
        want = chunk_positions(seq, cp, "ring")
        got = [tuple(int(x) for x in ps) for ps in s.balanced_positions(seq, cp)]
        if got != want:
            return compare(want, got, f"s={seq}, c={cp}: device i holds chunks i and 2c-1-i")
        work = s.causal_work(want)
        if len(set(work)) != 1 or sum(work) != seq * (seq + 1) // 2:
            return expect(False, f"equal work, total {seq * (seq + 1) // 2}", work, "a query at t sees t + 1 keys")
    return ok()


def check_ring_bytes(s):
    "ring_bytes_per_step equals attention_bytes_per_step (3(c - 1) blocks when c > 1, nothing on one device)"
    def case(L, B, m, seq, h, cp):
        gpt = GPTConfig(layers=L, hidden=h, heads=1, seq_len=seq, vocab=8)
        why = ("one device has no neighbour: the ring sends nothing" if cp == 1
               else "forward c-1 K/V hops, backward c-1 K/V hops and c-1 dK/dV hops: 3(c - 1) "
               "blocks, each 2 B (s/c) h float64 values (K and V), per layer and micro-batch")
        return (attention_bytes_per_step(gpt, L, B, m, cp, "ring"), s.ring_bytes_per_step(L, B, m, seq, h, cp),
                f"L={L} B={B} m={m} s={seq} h={h} c={cp}: {why}")
    return each_case([(2, 4, 1, 16, 16, 4), (3, 2, 2, 32, 8, 2), (1, 1, 4, 64, 32, 8), (2, 2, 1, 8, 4, 1)], case, rtol=0.0)


EXERCISE_GPT = GPTConfig(layers=2, hidden=16, heads=4, seq_len=16, vocab=32)   # the run part 5 states


def _first_difference(mine, want, default, prefix="TrainConfig"):
    """(field, wanted, found) of the first field the exercise states (where the dataclass `want`
    differs from `default`; every field when `default` is None) that `mine` (a Record the sandbox sent, or the object itself
    in-process) does not have; None when none. Fields train() derives (dp: 0 -> 1) are not stated."""
    for f in dataclasses.fields(want):
        w, g = getattr(want, f.name), getattr(mine, f.name, None)
        if default is not None and w == getattr(default, f.name):
            continue
        if dataclasses.is_dataclass(w):
            found = _first_difference(g, w, None, f"{prefix}.{f.name}")   # the model: every field
            if found:
                return found
        elif g != w:
            return f"{prefix}.{f.name}", w, g
    return None


def check_real_run(s):
    "train_context_parallel(c), c chosen when grading: your configuration, rerun by the grader, equals one device and sends what the formula says"
    cp = hidden_random().choice((2, 4))
    want = TrainConfig(EXERCISE_GPT, strategy="cp", devices=cp, cp=cp, cp_comm_type="p2p", global_batch=4, steps=2)
    r = s.train_context_parallel(cp)
    cfg = getattr(r, "config", None)
    if type_name(cfg) != "TrainConfig":
        return compare("a TrainResult (what train returns)", type_name(r), "return train(TrainConfig(...))")
    wrong = _first_difference(cfg, want, TrainConfig(EXERCISE_GPT))
    if wrong:
        return compare(wrong[1], wrong[2], f"{wrong[0]} of the run part 5 states, with cp={cp}")
    # never the numbers your result reports: parasim reruns your configuration in a sandbox holding no code of yours
    run = s.run_in_sandbox("train", cfg)
    if not run["max_rel_weight_diff_vs_single"] < 1e-9:
        return expect(False, "max_rel_weight_diff_vs_single < 1e-9", run["max_rel_weight_diff_vs_single"])
    sent = want.steps * cp * attention_bytes_per_step(want.model, want.model.layers, want.micro_batch_size, want.m, cp)
    return compare(sent, run["bytes_by_collective"].get("send", 0),
                   f"strategy='cp', cp={cp}, cp_comm_type='p2p': the ring's Send bytes over all steps and devices")


def _ring_sent(cp: int, steps: int, batch: int) -> float:
    """The ring's Send bytes of part 5's model on cp devices, `steps` steps of one micro-batch of `batch`."""
    cfg = TrainConfig(EXERCISE_GPT, strategy="cp", devices=cp, cp=cp, cp_comm_type="p2p", global_batch=batch, steps=steps)
    return float(steps * cp * attention_bytes_per_step(EXERCISE_GPT, EXERCISE_GPT.layers, cfg.micro_batch_size, cfg.m, cp))


check_prediction = prediction_item(
    "prediction: the ring's Send bytes of a run with c, steps and batch drawn when grading (within 2 %)",
    answer=_ring_sent, ask="predicted_ring_bytes",
    case=lambda: (hidden_random().choice([2, 4, 8]), hidden_random().randint(1, 6), hidden_random().randint(1, 16)),
    hint=lambda cp, steps, batch: f"c={cp}, {steps} steps, batch {batch}: steps x devices x (3c - 2) K/V blocks per layer and micro-batch")


def split_case() -> tuple[int, int]:
    """(s, c) drawn when grading: s a multiple of 2c."""
    rng = hidden_random()
    cp = rng.randint(2, 8)
    return 2 * cp * rng.randint(1, 64), cp


check_explanation = explanation_item(
    "explanation: why device i holds chunks i and 2c-1-i (a choice, and each device's work on a split drawn when grading)",
    ask="why_balanced_split", right="b", case=split_case,
    answer=lambda seq, cp: sum(t + 1 for t in chunk_positions(seq, cp, "ring")[0]),
    reason=lambda seq, cp: f"s={seq}, c={cp}: a query at t sees t + 1 keys; the c devices share the s(s+1)/2 pairs equally",
    hints={"a": "the ring has c devices whatever the split",
           "c": "every device sends the same K/V blocks whatever the split (attention_bytes_per_step)",
           "d": "the two chunks are not contiguous: chunk i and chunk 2c-1-i"})

check_plot_of_your_run = own_plot_item(
    "your own run: the timeline of your train_context_parallel(c) (c drawn when grading, rerun by parasim), bar by bar",
    ask="plot_my_run", case=lambda: (hidden_random().choice([2, 4]),),
    given=lambda s, cp: s.train_context_parallel(cp).config, probe="timeline",
    what=lambda cp: f"the run your train_context_parallel({cp}) configures, rerun by parasim",
    hint="return viz.timeline(train_context_parallel(c).trace): the timeline of your own run")
