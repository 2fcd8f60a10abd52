"""Autograder of lesson 07: shards against Layout, the MLP against one device, bytes against train("tp")."""

import numpy as np

from simulator import DeviceMesh, GPTConfig, Layout, TrainConfig, train, viz
from simulator.grading import compare, each_case, explanation_item, hidden_random, ok, own_plot_item, prediction_item

LESSON = {
    "title": "Tensor parallelism: the Megatron MLP",
    "goals": ["cut a weight by columns (column-parallel) and by rows (row-parallel) as Layouts",
              "compute the Megatron MLP with one all-reduce and check it against one device",
              "count the all-reduces and bytes of tensor-parallel GPT training and measure them with train()"],
    "app_pages": ["Sharding & auto-parallel", "Training playground"],
    "requires": ["strategy:tp", "Layout", "train"],
    "minutes": 50,
    "prerequisites": [1, 2, 3],
    # parasim's run answers the prediction: it raises while your prediction runs
    "withhold": {"predicted_bytes_tp": ["simulator.training:train"]},
}


def gelu(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))


def check_column_shards(s):
    "column_shards equals Layout(mesh, [None, 'tp']).shard(W)"
    W = np.arange(6 * 8, dtype=float).reshape(6, 8)
    for t in (1, 2, 4):
        want = Layout(DeviceMesh({"tp": t}), [None, "tp"]).shard(W)
        got = s.column_shards(W, t)
        for i in range(t):
            if not np.array_equal(np.asarray(got[i]), want[i]):
                return compare(want[i], got[i], f"t={t}, rank {i}: columns [i N/t, (i+1) N/t)")
    return ok()


def check_row_shards(s):
    "row_shards equals Layout(mesh, ['tp', None]).shard(W)"
    W = np.arange(8 * 6, dtype=float).reshape(8, 6)
    for t in (1, 2, 4):
        want = Layout(DeviceMesh({"tp": t}), ["tp", None]).shard(W)
        got = s.row_shards(W, t)
        for i in range(t):
            if not np.array_equal(np.asarray(got[i]), want[i]):
                return compare(want[i], got[i], f"t={t}, rank {i}: rows [i N/t, (i+1) N/t)")
    return ok()


def check_mlp(s):
    "the partial sums add up to GeLU(x A) B (the all-reduce gives the single-device result)"
    rng = np.random.default_rng(7)
    x, A, B = rng.standard_normal((5, 8)), rng.standard_normal((8, 32)), rng.standard_normal((32, 8))
    want = gelu(x @ A) @ B
    for t in (1, 2, 4, 8):
        parts = s.megatron_mlp_partials(x, A, B, t)
        if len(parts) != t:
            return compare(t, len(parts), "one partial per rank")
        if not np.allclose(sum(parts), want, rtol=1e-9):
            return compare(want, sum(parts), f"t={t}: GeLU must act on x A_i before the row-parallel matmul")
    return ok()


def _tp_run(t, layers=2):
    g = GPTConfig(layers=layers, hidden=32, heads=4, seq_len=16, vocab=32)
    return train(TrainConfig(g, strategy="tp", devices=t, tp=t, global_batch=4), check=False)


def check_allreduces_per_block(s):
    "allreduces_per_block equals the all-reduces each transformer block issues in train(strategy='tp')"
    layers = 2
    r = _tp_run(2, layers)
    for block in range(1, layers + 1):  # layer 0 is the embedding, layers+1 the LM head
        n = sum(1 for e in r.trace.events if e.device == 0 and e.kind == "all_reduce"
                and f"act/tp/{block}/" in e.name)
        if s.allreduces_per_block() != n:
            return compare(n, s.allreduces_per_block(), "attention and MLP, forward and backward")
    return ok()


def check_bytes(s):
    "tp_bytes_per_device equals the bytes each rank sends in train(strategy='tp')"
    return each_case([(2, 2), (4, 2), (2, 1)], lambda t, layers: (
        _tp_run(t, layers).bytes_sent_per_device[0], s.tp_bytes_per_device(layers, 4, 16, 32, t),
        f"t={t}, L={layers}, b=4, s=16, h=32, float64"))


check_prediction = prediction_item(
    "prediction: the bytes one device sends in a tensor-parallel step, t and the layers drawn when grading (within 2 %)",
    answer=lambda t, layers: float(_tp_run(t, layers).bytes_sent_per_device[0]), ask="predicted_bytes_tp",
    case=lambda: (hidden_random().choice([2, 4]), hidden_random().randint(1, 4)),
    hint=lambda t, layers: f"t={t}, L={layers}: 2 all-reduces per block forward and 2 backward, each of b s h values")


def gelu_case() -> tuple[int, int, int]:
    """(h, f, t) drawn when grading: f a multiple of t."""
    rng = hidden_random()
    t = rng.choice([2, 4, 8, 16])
    return rng.randint(8, 4096), t * rng.randint(1, 2048), t


check_explanation = explanation_item(
    "explanation: why the MLP needs one all-reduce, not two (a choice, and GeLU's columns per rank on a case drawn when grading)",
    ask="why_one_allreduce", right="b", case=gelu_case,
    answer=lambda h, f, t: Layout(DeviceMesh({"tp": t}), [None, "tp"]).local_shape((h, f))[1],
    reason=lambda h, f, t: f"A ({h}, {f}) cut by columns over t={t}: each rank holds whole columns of x A",
    hints={"a": "GeLU is not linear: GeLU(a + b) != GeLU(a) + GeLU(b) (part 3 fails if you sum first)",
           "c": "parasim's trace shows the all-reduces; none sits between the two matmuls",
           "d": "B is cut by rows (row_shards); a replicated B would not give partial sums"})

check_plot_of_your_run = own_plot_item(
    "your own run: its timeline (t and the layers drawn when grading), bar by bar", ask="plot_my_run",
    case=lambda: (hidden_random().choice([2, 4]), hidden_random().randint(1, 3)),
    run=lambda t, layers: _tp_run(t, layers).trace, draw=viz.timeline,
    what=lambda t, layers: f"the tensor-parallel run with t = {t}, {layers} layers (chosen when grading)",
    hint="return viz.timeline(r.trace) of that run")
