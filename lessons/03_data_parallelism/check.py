"""Autograder of lesson 03: gradients against one device, bytes and learning rates against train()."""

import numpy as np

from simulator import MLPConfig, SimpleDeviceModel, TrainConfig, build_model, get_batch, train, viz
from simulator.grading import compare, each_case, explanation_item, hidden_random, ok, own_plot_item, prediction_item

LESSON = {
    "title": "Data parallelism and gradient averaging",
    "goals": ["split a batch over data-parallel replicas",
              "show that averaging the replicas' gradients reproduces the full-batch gradient",
              "predict the all-reduce bytes of a data-parallel step and measure them with train()",
              "relate summed (gradients_mean=False) and averaged gradients through the learning rate"],
    "app_pages": ["Training playground", "Collectives"],
    "requires": ["train", "TrainConfig", "build_model", "get_batch"],
    "minutes": 45,
    "prerequisites": [2],
    # parasim's run answers the prediction: it raises while your prediction runs
    "withhold": {"predicted_bytes": ["simulator.training:train"]},
}

MODEL = MLPConfig(in_dim=16, hidden=16, layers=4, classes=16)


def check_shards(s):
    "shard_batch gives dp equal, contiguous shards that rebuild the batch"
    x, y = get_batch(MODEL, 16, step=0)
    for dp in (1, 2, 4, 8):
        shards = s.shard_batch(x, y, dp)
        if len(shards) != dp:
            return compare(dp, len(shards), "one shard per replica")
        xs = np.concatenate([a for a, _ in shards])
        ys = np.concatenate([b for _, b in shards])
        if not (np.array_equal(xs, x) and np.array_equal(ys, y)) or {len(a) for a, _ in shards} != {16 // dp}:
            return compare(f"{dp} shards of {16 // dp} rows in order", [len(a) for a, _ in shards],
                           "contiguous row blocks, replica 0 first")
    return ok()


def check_gradients(s):
    "dp_gradients equals the single-device full-batch gradient (rtol 1e-9)"
    model = build_model(MODEL)
    params = model.init_params(3)
    x, y = get_batch(MODEL, 16, step=1)
    full = model.loss_and_grads(params, x, y)[1]
    for dp in (2, 4):
        got = s.dp_gradients(model, params, x, y, dp)
        for li, layer in enumerate(full):
            for name, g in layer.items():
                mine = got[li][name]
                if np.shape(mine) != g.shape or not np.allclose(mine, g, rtol=1e-9, atol=1e-14):
                    return compare(g, mine, f"dp={dp}, layer {li} {name!r}: mean of the shards' gradients")
    return ok()


def check_bytes(s):
    "grad_bytes_per_device equals the bytes train(strategy='dp') measures per device"
    model = build_model(MODEL)
    return each_case([(2,), (4,)], lambda dp: (
        train(TrainConfig(MODEL, strategy="dp", devices=dp, global_batch=16)).bytes_sent_per_device[0],
        s.grad_bytes_per_device(model, dp), f"dp={dp}: a ring all-reduce of every float64 gradient"))


def check_mean_lr(s):
    "equivalent_mean_lr: the averaged SGD run trains the same weights as the summed run"
    dp, lr = 4, 0.05
    lr_mean = s.equivalent_mean_lr(lr, dp)
    base = dict(strategy="dp", devices=dp, global_batch=16, optimizer="sgd", steps=2)
    summed = train(TrainConfig(MODEL, lr=lr, gradients_mean=False, **base), check=False).params
    mean = train(TrainConfig(MODEL, lr=float(lr_mean), **base), check=False).params
    diff = max(float(np.abs(summed[i][k] - mean[i][k]).max()) for i in range(len(mean)) for k in mean[i])
    return compare(0.0, diff, f"lr_sum={lr}, dp={dp}: the summed gradient is dp times the mean", atol=1e-12)


CLOCK = dict(flops_per_s=1e9, memory_bandwidth_Bps=1e12, latency_s=1e-6, bandwidth_Bps=1e9)   # the README's clock


def mlp(hidden: int) -> MLPConfig:
    return MLPConfig(in_dim=16, hidden=hidden, layers=4, classes=16)


check_prediction = prediction_item(
    "prediction: the bytes one device sends in one step, dp and the hidden width drawn when grading (within 2 %)",
    answer=lambda dp, hidden: float(train(TrainConfig(mlp(hidden), strategy="dp", devices=dp, global_batch=2 * dp),
                                          check=False).bytes_sent_per_device[0]),
    ask="predicted_bytes", case=lambda: (hidden_random().randint(2, 8), hidden_random().randint(4, 48)),
    hint=lambda dp, hidden: f"dp={dp}, hidden={hidden}: a ring all-reduce sends 2 (n-1)/n of the gradient's bytes per device")


def shards() -> tuple[list[int]]:
    """Unequal shard sizes drawn when grading: 2 to 6 replicas of 1 to 12 samples each."""
    rng = hidden_random()
    return ([rng.randint(1, 12) for _ in range(rng.randint(2, 6))],)


check_explanation = explanation_item(
    "explanation: why the replicas keep the weights of one device (a choice, and its weight on shards drawn when grading)",
    ask="why_same_weights", right="b", case=shards, answer=lambda sizes: sizes[0] / sum(sizes),
    reason=lambda sizes: (f"shards of {sizes} samples: the loss is a mean over all {sum(sizes)} samples, so replica 0's "
                          "mean enters with its share of them"),
    hints={"a": "each replica sees only its shard (part 1): its gradient alone differs from the full batch's",
           "c": "each replica holds its own copy (bytes_sent_per_device would be 0 otherwise)",
           "d": "every replica runs the optimizer on the same averaged gradient; nothing is broadcast"})

check_plot_of_your_run = own_plot_item(
    "your own run: its timeline (dp and steps drawn when grading), bar by bar", ask="plot_my_run",
    case=lambda: (hidden_random().choice([2, 4, 8]), hidden_random().randint(1, 3)),
    run=lambda dp, steps: train(TrainConfig(MODEL, strategy="dp", devices=dp, global_batch=16, steps=steps),
                                device_model=SimpleDeviceModel(**CLOCK)).trace,
    draw=viz.timeline, what=lambda dp, steps: f"the data-parallel run with dp = {dp}, batch 16, {steps} steps (chosen when grading)",
    hint="return viz.timeline(r.trace) of train(TrainConfig(MODEL, strategy='dp', devices=dp, global_batch=16, steps=steps), device_model=clock)")
