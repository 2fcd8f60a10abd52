"""Tree, chain and halving-doubling plans (see algorithms.py for the slot conventions).

- Binomial tree broadcast / reduce: ceil(log2 n) steps, whole array per edge (one slot);
  MPICH's default for short messages (Thakur, Rabenseifner & Gropp 2005, Sec. 4.1).
- Tree all_reduce: binomial reduce to rank 0, then binomial broadcast: 2 ceil(log2 n) steps.
  (NCCL's double binary tree, Sanders et al. 2009, halves the per-edge bytes with two trees; we
  keep the single binomial tree, which is the one drawn in textbooks.)
- Chain ("ring") broadcast / reduce: the array cut in n chunks pipelined along
  root, root+1, ..., root-1: 2n-2 steps, every non-final rank sends S bytes (bus factor 1).
- Recursive halving-doubling all_reduce (Rabenseifner; Thakur et al. 2005, Sec. 4.5): p' = the
  largest power of two <= n and r = n - p'. Pre-step: even ranks 2i < 2r add their whole array
  into rank 2i+1 and sit out; the p' remaining ranks halve (reduce-scatter, partner distance
  p'/2, p'/4, ..., 1) then double (all-gather, distance 1, 2, ..., p'/2) over p' chunks; post-step:
  rank 2i+1 returns the result to 2i. Steps 2 log2 p' (+2 when n is not a power of two); each
  participant sends 2(p'-1)/p' S. A step may move several chunks between one pair of ranks:
  `PlanStep.links()` sums them into one message per pair.
- Dissemination barrier (Hensgen, Finkel & Manber 1988): step k, rank r signals r + 2^k.
"""

from __future__ import annotations

from .plan import PlanStep, Transfer


def ceil_log2(n: int) -> int:
    return (n - 1).bit_length()


def pow2_floor(n: int) -> int:
    return 1 << (n.bit_length() - 1)


def tree_broadcast(n: int, c: list[int], root: int = 0) -> list[PlanStep]:
    """Step k: relative ranks v < 2^k send to v + 2^k (relative rank v = (rank - root) mod n)."""
    steps = []
    for k in range(ceil_log2(n)):
        ts = tuple(Transfer((v + root) % n, (v + (1 << k) + root) % n, 0, 0, c[0])
                   for v in range(1 << k) if v + (1 << k) < n)
        steps.append(PlanStep(ts, f"tree broadcast {k + 1}/{ceil_log2(n)}"))
    return steps


def tree_reduce(n: int, c: list[int], root: int = 0) -> list[PlanStep]:
    """The broadcast tree run backwards: the farthest subtrees add into their parents first."""
    steps = []
    for k in reversed(range(ceil_log2(n))):
        ts = tuple(Transfer((v + (1 << k) + root) % n, (v + root) % n, 0, 0, c[0], True)
                   for v in range(1 << k) if v + (1 << k) < n)
        steps.append(PlanStep(ts, f"tree reduce {ceil_log2(n) - k}/{ceil_log2(n)}"))
    return steps


def tree_all_reduce(n: int, c: list[int], root: int = 0) -> list[PlanStep]:
    return tree_reduce(n, c, 0) + tree_broadcast(n, c, 0)


def chain_broadcast(n: int, c: list[int], root: int = 0) -> list[PlanStep]:
    """Hop h goes from position h to h+1 (position p = rank root+p); chunk s-h crosses it at step s."""
    k = len(c)
    steps = []
    for s in range(k + n - 2):
        ts = tuple(Transfer((root + h) % n, (root + h + 1) % n, s - h, s - h, c[s - h])
                   for h in range(n - 1) if 0 <= s - h < k)
        steps.append(PlanStep(ts, f"chain broadcast {s + 1}/{k + n - 2}"))
    return steps


def chain_reduce(n: int, c: list[int], root: int = 0) -> list[PlanStep]:
    """Hop g goes from position n-1-g to n-2-g (towards the root); chunk s-g crosses it at step s."""
    k = len(c)
    steps = []
    for s in range(k + n - 2):
        ts = tuple(Transfer((root + n - 1 - g) % n, (root + n - 2 - g) % n, s - g, s - g, c[s - g], True)
                   for g in range(n - 1) if 0 <= s - g < k)
        steps.append(PlanStep(ts, f"chain reduce {s + 1}/{k + n - 2}"))
    return steps


def halving_doubling_all_reduce(n: int, c: list[int], root: int = 0) -> list[PlanStep]:
    p = pow2_floor(n)
    extra = n - p
    old = [2 * i + 1 if i < extra else i + extra for i in range(p)]  # participant -> group rank
    steps = []
    if extra:
        steps.append(PlanStep(tuple(Transfer(2 * i, 2 * i + 1, ch, ch, c[ch], True) for i in range(extra)
                                for ch in range(p)), "fold the extra ranks in"))
    lo, hi = [0] * p, [p] * p
    mask = p // 2
    while mask:
        ts = []
        new_lo, new_hi = lo[:], hi[:]
        for i in range(p):
            mid = (lo[i] + hi[i]) // 2
            keep, give = ((mid, hi[i]), (lo[i], mid)) if i & mask else ((lo[i], mid), (mid, hi[i]))
            ts += [Transfer(old[i], old[i ^ mask], ch, ch, c[ch], True) for ch in range(*give)]
            new_lo[i], new_hi[i] = keep
        lo, hi = new_lo, new_hi
        steps.append(PlanStep(tuple(ts), f"halving, distance {mask}"))
        mask //= 2
    mask = 1
    while mask < p:
        ts = []
        new_lo, new_hi = lo[:], hi[:]
        for i in range(p):
            j = i ^ mask
            ts += [Transfer(old[i], old[j], ch, ch, c[ch]) for ch in range(lo[i], hi[i])]
            new_lo[i], new_hi[i] = min(lo[i], lo[j]), max(hi[i], hi[j])
        lo, hi = new_lo, new_hi
        steps.append(PlanStep(tuple(ts), f"doubling, distance {mask}"))
        mask *= 2
    if extra:
        steps.append(PlanStep(tuple(Transfer(2 * i + 1, 2 * i, ch, ch, c[ch]) for i in range(extra)
                                for ch in range(p)), "return the result to the extra ranks"))
    return steps


def dissemination_barrier(n: int, c: list[int], root: int = 0) -> list[PlanStep]:
    return [PlanStep(tuple(Transfer(r, (r + (1 << k)) % n, 0, 0, 0) for r in range(n)), f"dissemination {k + 1}")
            for k in range(ceil_log2(n))]
