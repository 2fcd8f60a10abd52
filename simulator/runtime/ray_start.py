"""Starting (or joining) Ray for the runtime: `ensure_ray`, and Ray's reports kept off stdout.

`ray` is imported inside functions only (the layering test holds it)."""

from __future__ import annotations

import contextlib
import logging
import os
import threading

from ..errors import ParasimError


def ensure_ray(address: str | None = None, num_cpus: int = 2, join_timeout_s: float | None = None,
               stated_s: float | None = None) -> bool:
    """Initialise Ray unless it already is; True if this call started it.

    Called from a thread other than the main one (a Streamlit script run, say), Ray is started
    from a parked daemon thread instead: Ray's head processes are started with PR_SET_PDEATHSIG,
    which Linux fires when the *thread* that started them exits, so a Ray started from a
    short-lived thread dies with it (and takes the process down). Joining a cluster at `address`
    also runs in that thread, abandoned after join_timeout_s (default 30 s; ray.init retries an
    address that answers but never completes the handshake for minutes); stated_s: the bound the
    refusal names (the caller's whole timeout, of which joining got what was left)."""
    import ray

    _quiet_driver()         # also when Ray was started by someone else: its reports stay off stdout
    if ray.is_initialized():
        return False
    if threading.current_thread() is threading.main_thread() and not address:
        _init(address, num_cpus)
        return True
    started, failure = threading.Event(), []

    def keeper():
        try:
            _init(address, num_cpus)
        except Exception as e:  # handed to the caller below
            failure.append(e)
        started.set()
        threading.Event().wait()  # park for the life of the process: Ray's processes stay alive

    threading.Thread(target=keeper, name="parasim-ray-keeper", daemon=True).start()
    bound = 300.0 if not address else 30.0 if join_timeout_s is None else float(join_timeout_s)
    if not started.wait(timeout=bound):
        said = bound if stated_s is None else stated_s
        raise ParasimError(f"cannot join the Ray cluster at {address} within {said:g} s" if address
                           else f"Ray did not start within {bound:g} s")
    if failure:
        raise failure[0]
    return True


def _quiet_driver() -> None:
    """Keep Ray's own reports off the driver's stdout, so `--json` prints pure JSON and a failure is
    parasim's one line: the errors Ray publishes to the driver ("(raylet) A worker died ...",
    printed on stdout by ray._private.worker.listen_error_messages) go to the "ray" logger at INFO
    (parasim starts Ray logging errors only), and the "Unhandled error" log of a failed
    call nobody awaited is off (parasim awaits every call it needs and names the failure itself)."""
    import ray._private.worker as ray_worker

    os.environ.setdefault("RAY_IGNORE_UNHANDLED_ERRORS", "1")
    if getattr(ray_worker, "print_to_stdstream", None) is not None:
        ray_log = logging.getLogger("ray")

        def to_log(data, ignore_prefix=False):
            for line in data.get("lines", ()):
                ray_log.info("(%s) %s", data.get("pid", "ray"), line)

        ray_worker.print_to_stdstream = to_log


def _init(address: str | None, num_cpus: int) -> None:
    import ray

    if address:
        try:
            ray.init(address=address, log_to_driver=False, logging_level=logging.ERROR)
        except ConnectionError as e:  # something answers on the port, but no Ray cluster
            raise ParasimError(f"cannot join the Ray cluster at {address}: {e}") from None
    else:
        try:
            with _loopback_only():
                ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR,
                         _node_ip_address=LOOPBACK)
        except Exception as e:  # noqa: BLE001 -- Ray raises bare Exception ("timed out during startup")
            raise ParasimError(f"Ray did not start on this machine: {' '.join(str(e).split())[:300]}") from None


LOOPBACK = "127.0.0.1"


@contextlib.contextmanager
def _loopback_only():
    """The embedded Ray serves this machine only: its node address is 127.0.0.1, and Ray's gRPC
    servers (GCS, raylet, workers) listen on the loopback interface when the node address is
    127.0.0.1 (Ray's `ray start --node-ip-address 127.0.0.1` setting for a local-only node).
    ray.init(_node_ip_address="127.0.0.1") alone is not enough: Ray 2.x resolves a loopback
    address to the machine's outward IP (services.resolve_ip_for_localhost) unless its cluster
    mode is off (ray_constants.ENABLE_RAY_CLUSTER, read at call time; RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0
    sets it only before Ray's import). It is off while the node starts, and restored after.
    tests/test_ray_loopback.py reads /proc/net/tcp to check every listening socket."""
    import ray._private.ray_constants as constants

    was = getattr(constants, "ENABLE_RAY_CLUSTER", None)
    constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        constants.ENABLE_RAY_CLUSTER = was
