# %% [markdown]
# # Lesson 13 (SOLUTION): context parallelism — ring attention by hand, then the balanced split
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
    # BEGIN SOLUTION: running max m, running sum l, unnormalised o; rescale by exp(m_old - m_new)
    m = np.full(T, -np.inf)
    l = np.zeros(T)
    o = np.zeros((T, d))
    size = T // blocks
    for b in range(blocks):
        cols = np.arange(b * size, (b + 1) * size)
        s = q @ k[cols].T / np.sqrt(d)  # (T, size)
        s = np.where(cols[None, :] <= np.arange(T)[:, None], s, -np.inf)
        m_new = np.maximum(m, s.max(axis=1))
        base = np.where(np.isfinite(m_new), m_new, 0.0)
        p = np.exp(s - base[:, None])
        alpha = np.exp(m - base)
        l = alpha * l + p.sum(axis=1)
        o = alpha[:, None] * o + p @ v[cols]
        m = m_new
    return o / l[:, None]
    # END SOLUTION


# %% [markdown]
# ## 2. Who holds which block at each ring step
# Device i starts with its own K/V block; after each step it passes the block it holds to device
# i + 1 and receives one from device i - 1.

# %%
def kv_block_at(step: int, device: int, cp: int) -> int:
    """The device whose K/V block `device` holds at ring step `step`."""
    # BEGIN SOLUTION: blocks move one device forward per step
    return (device - step) % cp
    # END SOLUTION


# %% [markdown]
# ## 3. The load-balanced causal split
# With causal masking the last tokens attend to everything and the first to almost nothing, so
# contiguous chunks give the last device most of the work. Cut the sequence into 2c chunks and
# give device i chunks i and 2c-1-i.

# %%
def balanced_positions(seq_len: int, cp: int) -> list[tuple[int, ...]]:
    """Token positions of each device, ascending."""
    # BEGIN SOLUTION: chunks i and 2cp-1-i of size seq_len / (2 cp)
    c = seq_len // (2 * cp)
    return [tuple(range(i * c, (i + 1) * c)) + tuple(range((2 * cp - 1 - i) * c, (2 * cp - i) * c))
            for i in range(cp)]
    # END SOLUTION


def causal_work(positions: list[tuple[int, ...]]) -> list[int]:
    """Per device: how many (query, key) pairs its queries attend to (key <= query), over the sequence."""
    # BEGIN SOLUTION: a query at position t attends to t + 1 keys
    return [sum(t + 1 for t in ps) for ps in positions]
    # END SOLUTION


# %% [markdown]
# ## 4. Bytes on the ring
# A K/V block is 2 x B x (s/c) x h float64 values. Per attention and device: forward passes c-1
# blocks on; backward passes the blocks on again (c-1) and their dK/dV (c-1 hops, the last one home).

# %%
def ring_bytes_per_step(layers: int, microbatch: int, microbatches: int, seq_len: int, hidden: int,
                        cp: int) -> int:
    """Bytes one device sends for ring attention in one training step."""
    # BEGIN SOLUTION: 3(c - 1) blocks of 2 B (s/c) h x 8 bytes, per layer and micro-batch, when c > 1; c = 1 sends nothing
    if cp == 1:
        return 0
    block = 2 * microbatch * (seq_len // cp) * hidden * 8
    return layers * microbatches * 3 * (cp - 1) * block
    # END SOLUTION


# %% [markdown]
# ## 5. Run it
# Train a tiny GPT with its sequence split c ways and compare with one device.

# %%
def train_context_parallel(cp: int, kind: str = "p2p"):
    """Two steps of GPTConfig(2, 16, 4, 16, 32), batch 4, strategy "cp" on cp devices; the TrainResult."""
    # BEGIN SOLUTION: TrainConfig(..., strategy='cp', devices=cp, cp=cp, cp_comm_type=kind)
    gpt = GPTConfig(layers=2, hidden=16, heads=4, seq_len=16, vocab=32)
    return train(TrainConfig(gpt, strategy="cp", devices=cp, cp=cp, cp_comm_type=kind, global_batch=4, steps=2))
    # END SOLUTION

# %% [markdown]
# ## 6. Predict, explain, then look at your own run
# Predict before you run anything: the ring's Send bytes over `steps` steps and all devices of
# part 5's model with c devices and a global batch of `batch` sequences in one micro-batch (the
# grader picks c, steps and batch when grading).

# %%
def predicted_ring_bytes(cp: int, steps: int, batch: int) -> float:
    """Your prediction of the Send bytes of that run, all steps and devices."""
    # BEGIN SOLUTION: steps x devices x your ring_bytes_per_step
    return steps * cp * ring_bytes_per_step(2, batch, 1, 16, 16, cp)
    # END SOLUTION


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
    # BEGIN SOLUTION: look at causal_work of part 3
    return "b", seq * (seq + 1) // 2 // cp
    # END SOLUTION


# %% [markdown]
# Your own run: part 5's run with c devices (the grader picks c); return its timeline,
# `viz.timeline(r.trace)`. The grader reruns the configuration your train_context_parallel(c)
# returns and compares the bars, so the figure must be of your run.

# %%
def plot_my_run(cp: int):
    """The matplotlib Figure of your context-parallel run's timeline."""
    # BEGIN SOLUTION: viz.timeline(train_context_parallel(cp).trace)
    from simulator import viz

    return viz.timeline(train_context_parallel(cp).trace)
    # END SOLUTION


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
