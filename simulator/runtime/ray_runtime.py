"""RayRuntime: each Device is a Ray actor; the shared driver loop submits calls with `.remote`.

Ray idioms (Ray docs, "Anti-patterns" and "Pass object arguments"): actors declared with
num_cpus=0 so n devices fit on any machine; every call is submitted without waiting; a chunk a
device sends is one return value of its call (num_returns = chunks + 1) and its ObjectRef is
passed as a TOP-LEVEL argument of the receiving device's next call, so Ray resolves it actor to
actor and the driver never fetches a chunk; the driver ray.get's the small acknowledgements once
at the end of `run`. Calls from one driver to one actor run in submission order, and every call
depends only on calls submitted before it, so nothing can deadlock. A collective whose members all
share one Ray node is instead one call per member (`_collective`), the members handing each other
the chunks through their mailboxes (chunk_mail.py); it waits only for members of the same
collective, which the walk's order has all reach it, as the step-by-step calls would.

`ray` is imported inside functions only. `ray.init()` is embedded by default (ray_start.py: no
dashboard, num_cpus fixed, worker logs not forwarded, Ray's error reports kept off stdout);
`address=` joins an existing cluster; an already initialised Ray is reused (and then not shut
down by `close`). Every wait is bounded (timeout_s, else limits.RAY_WAIT_S): after a failed
call the driver aborts the run's collectives in the members' mailboxes and kills the actors whose
calls still run after limits.FAILURE_GRACE_S (`_stop`), so a fault is named, never waited on.
"""

from __future__ import annotations

import secrets
import time
import weakref
from typing import Any

from ..errors import DeviceFailure, ParasimError
from ..limits import ACTOR_START_S, FAILURE_GRACE_S, RAY_WAIT_S
from .base import Runtime
from .chunk_mail import abort_upto
from .device import CollectiveCall, Device
from .ray_actor import DeviceActor, RemoteFailure
from .ray_address import check_address
from .ray_start import ensure_ray
from .shm_chunks import unlink_prefix

POLL_S = 0.5  # how often the driver looks for a failed call while it waits

_OPEN: weakref.WeakSet = weakref.WeakSet()  # the RayRuntimes not closed yet


class RayRuntime(Runtime):
    """n actors. timeout_s bounds every wait (None: limits.RAY_WAIT_S; never for ever); devices_per_node > 0 places
    the actors with a placement group of one bundle per simulated node (ranks r // devices_per_node
    share a bundle, so intra-node groups stay on one Ray node; bundles SPREAD over Ray nodes).
    shared_memory: collective chunks between actors of one Ray node go through the actors'
    shared-memory buffers (ray_actor.py, shm_chunks.py); False sends every chunk through Ray's
    object store, a chunk a member only passes on by its handle (the runtime before issue 18)."""

    name = "ray"

    def __init__(self, n_devices: int, address: str | None = None, num_cpus: int = 2,
                 timeout_s: float | None = None, devices_per_node: int = 0, device_class: type = Device,
                 shared_memory: bool = True):
        super().__init__(n_devices)
        self.shared_memory = bool(shared_memory)
        self.forward_by_handle = not self.shared_memory
        import ray

        deadline = None if timeout_s is None else time.monotonic() + float(timeout_s)
        if address:  # checked even when Ray is already up: a dead address must not pass silently
            check_address(address, timeout_s)
        # joining shares the caller's bound with the probe: an HTTP/2 port that is not Ray's GCS
        # passes the probe, and ray.init then retries it; the whole refusal stays within timeout_s
        self._owns_ray = ensure_ray(address, num_cpus,
                                    None if deadline is None else max(deadline - time.monotonic(), 0.5), timeout_s)
        self.timeout_s, self.device_class = timeout_s, device_class
        self.devices_per_node = int(devices_per_node)
        self._where: dict = {}  # acknowledgement ref -> (rank, what the call runs)
        self._shm = f"psm_pz{secrets.token_hex(4)}_"  # this runtime's segment names start so
        self._made = [0] * self.n_devices  # actors made per rank (a restart makes another)
        self.placement_group = None
        if self.devices_per_node > 0:
            from ray.util.placement_group import placement_group

            n_nodes = -(-self.n_devices // self.devices_per_node)
            self.placement_group = placement_group(
                [{"CPU": 0.001 * self.devices_per_node}] * n_nodes, strategy="SPREAD")
            ray.get(self.placement_group.ready(), timeout=timeout_s or 60)
        self.actors = [self._new_actor(r) for r in range(self.n_devices)]
        self._rank_of = {a._actor_id.hex(): r for r, a in enumerate(self.actors)}
        # actors start slowly on a busy machine: the bound is per call, not for startup
        self._introduce(timeout=max(ACTOR_START_S, self.wait_s))
        _OPEN.add(self)

    def _introduce(self, timeout: float | None = None) -> None:
        """Tell every actor which ranks share its Ray node (their collective chunks go through
        shared memory, simulator/runtime/shm_chunks.py) and where their mailboxes are
        (chunk_mail.py)."""
        import ray

        refs = [a.whereabouts.remote() for a in self.actors]
        ray.wait(refs, num_returns=len(refs), timeout=timeout)
        where = []
        for ref in refs:  # a dead actor has no node: nobody sends it shared memory
            try:
                where.append(ray.get(ref, timeout=0))
            except (ray.exceptions.RayError, ray.exceptions.GetTimeoutError):
                where.append((None, None, None))
        self._where_is = where
        ray.wait([a.set_neighbours.remote({r: (addr, pid) for r, (n, pid, addr) in enumerate(where)
                                           if n is not None and n == node and self.shared_memory})
                  for a, (node, _, _) in zip(self.actors, where)], num_returns=len(refs), timeout=timeout)

    def _hand_to_hand(self, ranks) -> bool:
        """True if a collective over `ranks` runs as one call per member, its chunks handed actor to
        actor (every member on one Ray node, with a mailbox, shared memory on)."""
        if not self.shared_memory:
            return False
        nodes = {self._where_is[r][0] for r in ranks}
        return len(nodes) == 1 and None not in nodes and all(self._where_is[r][2] for r in ranks)

    def _collective(self, program, ev, call) -> None:
        """One `collective_run` call per member for the whole collective where the members can hand
        each other the chunks (`_hand_to_hand`): no driver round trip per step. Each member gets
        the same per-step CollectiveCall as the step-by-step driver (base.py) would give it, so
        it runs the same steps, counts the same bytes and ends with the same result. Elsewhere,
        step by step through Ray (base.py)."""
        if not self._hand_to_hand([r for r, _ in ev.at]):
            return super()._collective(program, ev, call)
        low, groot, key = self._start_collective(program, ev)
        plan, n_steps = low.plan, len(low.plan.steps)
        for g, (r, i) in enumerate(ev.at):
            steps = []
            for s in range(n_steps + 1):
                recv_at = low.recvs[s - 1][g] if s else []
                send_at = low.sends[s][g] if s < n_steps else []
                if recv_at or send_at or s == 0 or s == n_steps:
                    spec = CollectiveCall(key, i, program.code[r][i], plan.n, g, groot, plan.n_chunks,
                                          tuple(plan.steps[s - 1].transfers[k] for k in recv_at),
                                          tuple(plan.steps[s].transfers[k] for k in send_at), s == 0, s == n_steps)
                    steps.append((s, spec, tuple(recv_at), tuple(send_at)))
            call(r, "collective_run", (tuple(steps), self._actor_wait_s()), 0)

    @property
    def wait_s(self) -> float:
        """The bounded wait of one run (timeout_s, else limits.RAY_WAIT_S): finite always."""
        return RAY_WAIT_S if self.timeout_s is None else float(self.timeout_s)

    def _actor_wait_s(self) -> float:
        """How long a member waits for a peer's chunk: beyond the driver's bounded wait (which
        names the straggler first and then aborts what still waits), so it never hangs."""
        return self.wait_s + FAILURE_GRACE_S

    def _prefix(self, rank: int) -> str:
        """The names of the shared-memory segments of rank's current actor start so."""
        return f"{self._shm}{rank}_{self._made[rank]}_"

    def _new_actor(self, rank: int, placed: bool = True):
        import ray

        self._made[rank] += 1

        opts: dict = {"num_cpus": 0, "max_restarts": 0}
        if self.placement_group is not None and placed:
            from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

            opts = {"num_cpus": 0.001, "max_restarts": 0, "scheduling_strategy": PlacementGroupSchedulingStrategy(
                self.placement_group, placement_group_bundle_index=rank // self.devices_per_node)}
        return ray.remote(DeviceActor).options(**opts).remote(rank, self.device_class, self._prefix(rank))

    # ---- fault tolerance: kill, probe, restart ----------------------------------------------------
    def kill(self, rank: int, reason: str = "killed") -> None:
        """A real `ray.kill` of the device's actor: its process ends, later calls raise."""
        import ray

        self._check_rank(rank)
        ray.kill(self.actors[rank], no_restart=True)

    def alive(self, rank: int) -> bool:
        """True if the actor answers within the timeout and its device has not failed."""
        import ray

        try:
            rep = ray.get(self.actors[rank].invoke.remote("report"), timeout=self.wait_s)
        except (ray.exceptions.RayError, ray.exceptions.GetTimeoutError):
            return False
        rep = rep[0] if isinstance(rep, tuple) else rep
        return not rep.get("failed") if isinstance(rep, dict) else True

    def restart(self, *ranks: int) -> None:
        """Replace each rank's actor by a new one (an empty device), all at once: the old actors are
        killed, the new ones started together and awaited in one bounded wait (one restart's time,
        not one per rank). A new actor goes to its node's bundle if that bundle still lives,
        otherwise wherever Ray finds room (its node is gone)."""
        import ray

        for rank in ranks:
            self._check_rank(rank)
        for rank in ranks:
            try:
                ray.kill(self.actors[rank], no_restart=True)
            except Exception:
                pass
            unlink_prefix(self._prefix(rank))  # what the old actor's pool left (its tracker may have died with it)
        fresh = {rank: self._new_actor(rank) for rank in ranks}
        wait_s = max(ACTOR_START_S, self.wait_s)
        ready = {rank: actor.invoke.remote("reset_counters") for rank, actor in fresh.items()}
        ray.wait(list(ready.values()), num_returns=len(ready), timeout=wait_s)
        for rank, ref in ready.items():
            try:
                ray.get(ref, timeout=0)
            except (ray.exceptions.RayError, ray.exceptions.GetTimeoutError):  # its bundle's node is gone
                ray.kill(fresh[rank], no_restart=True)
                unlink_prefix(self._prefix(rank))
                fresh[rank] = self._new_actor(rank, placed=False)
        for rank, actor in fresh.items():
            self.actors[rank] = actor
            self._rank_of[actor._actor_id.hex()] = rank
            self._kernels_on[rank] = set()
        self._introduce(timeout=wait_s)

    def node_of(self) -> list[str]:
        """The Ray node id of every device."""
        import ray

        return ray.get([a.node_id.remote() for a in self.actors], timeout=self.wait_s)

    # ---- calls ---------------------------------------------------------------------------------------
    def _call(self, rank: int, method: str, args: tuple, n_out: int) -> tuple[list, Any]:
        refs = self.actors[rank].invoke.options(num_returns=n_out + 1).remote(method, *args)
        ack = refs if n_out == 0 else refs[-1]
        self._where[ack] = (rank, _what(method, args))
        if n_out == 0:
            return [], refs
        return list(refs[:-1]), refs[-1]

    def _first_unfinished(self, handles: list) -> tuple[int, str]:
        import ray

        ready, pending = ray.wait(handles, num_returns=len(handles), timeout=0)
        for h in pending:
            if h in self._where:
                return self._where[h]
        return -1, f"{len(pending)} unfinished call(s)"

    def _wait(self, handles: list) -> list:
        try:
            return self._get(handles)
        finally:
            for h in handles:
                self._where.pop(h, None)

    def _get(self, handles: list) -> list:
        """The values of `handles`, within the bounded wait. At the first failed call (or when the
        bound runs out) the calls still running are stopped (`_stop`) and the failure is named."""
        import ray

        deadline = time.monotonic() + self.wait_s
        values: dict = {}
        errors: list = []
        pending = list(dict.fromkeys(handles))
        while pending and not errors and time.monotonic() < deadline:
            left = deadline - time.monotonic()
            ready, pending = ray.wait(pending, num_returns=len(pending), timeout=max(0.0, min(left, POLL_S)))
            self._collect(ready, values, errors)
        if not pending and not errors:
            return [values[h] for h in handles]
        if not errors:
            rank, where = self._first_unfinished(pending)
            late = DeviceFailure(rank, where, f"no answer within the bounded wait of {self.wait_s} s "
                                 "(straggler, lost message or dead node)")
            self._stop(pending, errors, str(late))
            raise late
        self._stop(pending, errors, f"a device failed: {self._root_cause(errors, handles)}")
        raise self._root_cause(errors, handles) from None

    def _collect(self, ready: list, values: dict, errors: list) -> None:
        """Read the finished calls: their values, or their failures."""
        import ray

        try:
            values.update(zip(ready, ray.get(ready, timeout=self.wait_s)))
            return
        except ray.exceptions.RayError:
            pass
        for h in ready:
            try:
                values[h] = ray.get(h, timeout=self.wait_s)
            except ray.exceptions.RayError as e:
                errors.append(e)

    def _stop(self, pending: list, errors: list, reason: str) -> None:
        """After a failure: abort every collective of the run in the members' mailboxes (those
        waiting for a failed peer stop now), let the other calls end within FAILURE_GRACE_S
        (their failures join `errors`), then kill the actors whose calls still run (a straggler,
        a member that never heard of the abort): recovery restarts them, nothing waits for ever."""
        import ray

        end = time.monotonic() + FAILURE_GRACE_S
        unreached = [w[2] for w in self._where_is if w[2]]
        while pending and time.monotonic() < end:
            if unreached:
                unreached = abort_upto(unreached, self._keys, reason)
            ready, pending = ray.wait(pending, num_returns=len(pending), timeout=min(POLL_S, max(0.0, end - time.monotonic())))
            self._collect(ready, errors=errors, values={})
        for rank in sorted({self._where[h][0] for h in pending if h in self._where}):
            ray.kill(self.actors[rank], no_restart=True)

    def _root_cause(self, errors: list, handles: list) -> Exception:
        """The failure to report: a dead actor first, then a device's own failure, then a peer's
        consequential abort, then a refusal; each one line naming the device."""
        import ray

        def rank_of(e) -> int:
            return self._rank_of.get(getattr(e, "actor_id", None) or "", -1)

        for e in errors:
            if isinstance(e, ray.exceptions.RayActorError) and not isinstance(e, ray.exceptions.RayTaskError):
                rank = rank_of(e)
                live = set(handles)
                what = next((w for h, (r, w) in self._where.items() if r == rank and h in live), "a Ray call")
                return DeviceFailure(rank, what, "its actor died (process or node lost)")
        causes = [getattr(e, "cause", None) for e in errors]
        fails = [DeviceFailure(*c.args) for c in causes if isinstance(c, RemoteFailure)]
        fails.sort(key=lambda f: f.reason.startswith("aborted"))
        if fails:
            return fails[0]
        return next((c for c in causes if isinstance(c, ParasimError)), errors[0])

    def close(self) -> None:
        import ray

        if not ray.is_initialized():
            return
        try:  # each actor unlinks its shared-memory buffers (a dead one's go with its process)
            ray.wait([a.close.remote() for a in self.actors], num_returns=len(self.actors), timeout=10)
        except Exception:
            pass
        for a in self.actors:
            ray.kill(a)
        self.actors = []
        unlink_prefix(self._shm)  # what a killed actor's pool left
        if self.placement_group is not None:
            from ray.util.placement_group import remove_placement_group

            remove_placement_group(self.placement_group)
            self.placement_group = None
        _OPEN.discard(self)
        if self._owns_ray:
            for other in list(_OPEN):  # Ray's shutdown would kill their actors before they unlink their buffers
                other.close()
            ray.shutdown()

    def __repr__(self) -> str:
        return f"RayRuntime({self.n_devices} actors)"


def _what(method: str, args: tuple) -> str:
    """A short name of a call: the first instruction it runs, for failure messages."""
    if method == "run_batch" and args and args[0]:
        index, ins = args[0][0]
        return f"instruction #{index} {ins!r}"
    if method == "collective_step" and args:
        return f"instruction #{args[0].index} {args[0].ins!r}"
    if method == "collective_run" and args and args[0]:
        return f"instruction #{args[0][0][1].index} {args[0][0][1].ins!r}"
    return f"a {method} call"

