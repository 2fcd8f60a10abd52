# %% [markdown]
# # Lesson 13 (EXERCISE): context parallelism — ring attention by hand, then the balanced split
#
# A sequence too long for one device is split over c devices. Fill in every function that raises
# `NotImplementedError("TODO ...")`, then run `parasim lesson check 13`. Experiments sit under
# `if __name__ == "__main__":`.

# %%
import numpy as np

from simulator import (GPTConfig, TrainConfig, attention_bytes_per_step, attention_forward, chunk_positions,
                       ring_steps, train)


# %% [markdown]
# ## 1. Attention one key block at a time (the online softmax)
# One head: q, k, v of shape (T, d). Cut the keys and values into `blocks` equal blocks and visit
# them in order, keeping per query row a running max m, a running sum l of exp(score - m) and an
# unnormalised output o. When a block raises the max from m to m', rescale l and o by exp(m - m').
# Causal: query t sees key u only if u <= t. At the end, out = o / l.

# %%
def online_softmax_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, blocks: int) -> np.ndarray:
    """Causal softmax(q k^T / sqrt(d)) v, visiting the keys in `blocks` blocks."""
    T, d = q.shape
    raise NotImplementedError("TODO: running max m, running sum l, unnormalised o; rescale by exp(m_old - m_new)")


# %% [markdown]
# ## 2. Who holds which block at each ring step
# Device i starts with its own K/V block; after each step it passes the block it holds to device
# i + 1 and receives one from device i - 1.

# %%
def kv_block_at(step: int, device: int, cp: int) -> int:
    """The device whose K/V block `device` holds at ring step `step`."""
    raise NotImplementedError("TODO: blocks move one device forward per step")


# %% [markdown]
# ## 3. The load-balanced causal split
# With causal masking the last tokens attend to everything and the first to almost nothing, so
# contiguous chunks give the last device most of the work. Cut the sequence into 2c chunks and
# give device i chunks i and 2c-1-i.

# %%
def balanced_positions(seq_len: int, cp: int) -> list[tuple[int, ...]]:
    """Token positions of each device, ascending."""
    raise NotImplementedError("TODO: chunks i and 2cp-1-i of size seq_len / (2 cp)")


def causal_work(positions: list[tuple[int, ...]]) -> list[int]:
    """Per device: how many (query, key) pairs its queries attend to (key <= query), over the sequence."""
    raise NotImplementedError("TODO: a query at position t attends to t + 1 keys")


# %% [markdown]
# ## 4. Bytes on the ring
# A K/V block is 2 x B x (s/c) x h float64 values. Per attention and device: forward passes c-1
# blocks on; backward passes the blocks on again (c-1) and their dK/dV (c-1 hops, the last one home).

# %%
def ring_bytes_per_step(layers: int, microbatch: int, microbatches: int, seq_len: int, hidden: int,
                        cp: int) -> int:
    """Bytes one device sends for ring attention in one training step."""
    raise NotImplementedError("TODO: 3(c - 1) blocks of 2 B (s/c) h x 8 bytes, per layer and micro-batch, when c > 1; c = 1 sends nothing")


# %% [markdown]
# ## 5. Run it
# Train a tiny GPT with its sequence split c ways and compare with one device.

# %%
def train_context_parallel(cp: int, kind: str = "p2p"):
    """Two steps of GPTConfig(2, 16, 4, 16, 32), batch 4, strategy "cp" on cp devices; the TrainResult."""
    raise NotImplementedError("TODO: TrainConfig(..., strategy='cp', devices=cp, cp=cp, cp_comm_type=kind)")

# %% [markdown]
# ## 6. Predict, explain, then look at your own run
# Predict before you run anything: the ring's Send bytes over `steps` steps and all devices of
# part 5's model with c devices and a global batch of `batch` sequences in one micro-batch (the
# grader picks c, steps and batch when grading).

# %%
def predicted_ring_bytes(cp: int, steps: int, batch: int) -> float:
    """Your prediction of the Send bytes of that run, all steps and devices."""
    raise NotImplementedError("TODO: steps x devices x your ring_bytes_per_step")


# %% [markdown]
# Why does the balanced split give device i the chunks i and 2c - 1 - i? Choose one letter:
#   a) it makes the ring shorter
#   b) with causal masking a late token attends to more keys than an early one; pairing an early
#      chunk with a late one gives every device the same work
#   c) it sends fewer bytes
#   d) it keeps each device's tokens contiguous in memory
# and the number your reason gives (the grader picks s and c): the (query, key) pairs each
# device computes under the balanced split of s tokens over c devices.

# %%
def why_balanced_split(seq: int, cp: int) -> tuple[str, int]:
    """(one letter: a, b, c or d; the causal work of each device)."""
    raise NotImplementedError("TODO: look at causal_work of part 3")


# %% [markdown]
# Your own run: part 5's run with c devices (the grader picks c); return its timeline,
# `viz.timeline(r.trace)`. The grader reruns the configuration your train_context_parallel(c)
# returns and compares the bars, so the figure must be of your run.

# %%
def plot_my_run(cp: int):
    """The matplotlib Figure of your context-parallel run's timeline."""
    raise NotImplementedError("TODO: viz.timeline(train_context_parallel(cp).trace)")


# %%
if __name__ == "__main__":
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((8, 4)) for _ in range(3))
    want, _ = attention_forward(q[None], k[None], v[None], 1)
    print("online softmax == softmax:", np.allclose(online_softmax_attention(q, k, v, 4), want[0]))
    print("balanced:", causal_work(balanced_positions(16, 4)),
          "contiguous:", causal_work(chunk_positions(16, 4, "all-to-all")))
    print(ring_steps(16, 4)[:4])
    r = train_context_parallel(4)
    print("vs one device:", r.max_rel_weight_diff_vs_single, r.trace.bytes_by_collective())
    print("formula, 2 steps x 4 devices:", 2 * 4 * attention_bytes_per_step(r.config.model, 2, 4, 1, 4))
