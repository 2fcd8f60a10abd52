"""CollectivePermute: a redistribution whose target shards are the source shards on other ranks.

When two layouts cut every tensor dim the same number of ways (and hold no pending sums), every
block the target needs already exists whole on some rank: each rank that lacks its block
receives it from one holder (point-to-point), the others keep theirs. This is XLA's
`collective-permute` (HLO operation semantics, "CollectivePermute"): one shard crosses the wire
per rank that moves, 0 B for the ranks that keep theirs. MindSpore's redistribution
(`redistribution_operator_infer.cc`) has no such operator, so parasim plans it only with
`enable_alltoall=True` (the XLA-like mode), see redistribution.py.

A transpose of cuts (mesh (2, 4), P('a', 'b') -> P('b', 'a')) is not a permutation (blocks
(8, 4) against (4, 8)); XLA first gives the blocks the target's shape with an all-to-all over a
factor of 'b' and then permutes them. `midpoint` finds that intermediate layout on the mesh whose
axes are refined into prime factors (`prime_mesh`).
"""

from __future__ import annotations

from math import prod

from ..layout import Layout
from ..mesh import DeviceMesh


def _primes(n: int) -> list[int]:
    out, p = [], 2
    while p * p <= n:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    return out + ([n] if n > 1 else [])


def prime_mesh(mesh: DeviceMesh) -> tuple[DeviceMesh, dict]:
    """`mesh` with each axis split into its prime factors (major first), and {axis: sub-axes}."""
    axes, amap = [], {}
    for name, size in zip(mesh.axis_names, mesh.shape):
        fs = _primes(size)
        subs = [name] if len(fs) <= 1 else [f"{name}p{j}" for j in range(len(fs))]
        axes += list(zip(subs, fs or [size]))
        amap[name] = tuple(subs)
    return DeviceMesh(axes), amap


def cuts(layout: Layout) -> list[int]:
    return [prod(layout.mesh.axis_size(a) for a in d) for d in layout.dims]


def is_permutation(src: Layout, dst: Layout) -> bool:
    """Same mesh, no pending sums, every dim cut the same number of ways, a different placement."""
    return (src.mesh == dst.mesh and not src.partial and not dst.partial
            and cuts(src) == cuts(dst) and src != dst)


def pairs(src: Layout, dst: Layout) -> tuple[tuple[int, int], ...]:
    """(sender, receiver) for every rank whose target block is not the block it holds; among
    several holders of a block the least loaded (then lowest) rank sends."""
    n = src.mesh.size
    holders: dict[tuple, list[int]] = {}
    for r in range(n):
        holders.setdefault(src.block_index(r), []).append(r)
    load = [0] * n
    out = []
    for r in range(n):
        want = dst.block_index(r)
        if src.block_index(r) != want:
            s = min(holders[want], key=lambda q: (load[q], q))
            load[s] += 1
            out.append((s, r))
    return tuple(out)


def midpoint(src: Layout, dst: Layout) -> Layout | None:
    """A layout with `dst`'s cuts per dim reached from `src` by local splits and moves of cuts
    between dims (minor cuts leave a dim that is cut too much, then replicated axes, then the
    freed ones, fill the dims cut too little); None if the factors do not fit."""
    mesh, want = src.mesh, cuts(dst)
    dims = [list(d) for d in src.dims]
    size = mesh.axis_size
    freed = []
    for d, w in enumerate(want):
        while w % prod(size(a) for a in dims[d]):
            freed.append(dims[d].pop())
    used = {a for d in dims for a in d} | set(freed)
    pool = [a for a in mesh.axis_names if a not in used] + freed
    for d, w in enumerate(want):
        need = w // prod(size(a) for a in dims[d])
        while need > 1:
            a = next((a for a in pool if need % size(a) == 0), None)
            if a is None:
                return None
            pool.remove(a)
            dims[d].append(a)
            need //= size(a)
    return Layout(mesh, dims)
