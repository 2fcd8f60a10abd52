"""A dead or malformed Ray address fails fast with one line (ray.init alone retried for 928 s)."""

import contextlib
import socket
import subprocess
import sys
import threading
import time

import pytest

from simulator.cli import main
from simulator.errors import ParasimError
from simulator.runtime.ray_runtime import check_address


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nobody listens there now
    return port


@pytest.mark.parametrize("address", ["not an address", "host:99999", "127.0.0.1:", ":6379", "127.0.0.1:x"])
def test_malformed_addresses_are_refused(address):
    with pytest.raises(ParasimError, match="is not HOST:PORT"):
        check_address(address, 1)


def test_a_dead_address_fails_within_the_timeout(capsys):
    t0 = time.monotonic()
    address = f"127.0.0.1:{_closed_port()}"
    assert main(["train", "--runtime", "ray", "--address", address, "--timeout-s", "2"]) == 2
    err = capsys.readouterr().err
    assert time.monotonic() - t0 < 30 and err.startswith(f"error: cannot reach the Ray cluster at {address}")
    assert err.count("\n") == 1


@contextlib.contextmanager
def _server(reply: bytes):
    """A local TCP server that accepts and sends `reply` (nothing when empty); yields its address."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    srv.settimeout(0.2)
    stop, conns = threading.Event(), []

    def serve():
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                continue
            conns.append(conn)
            if reply:
                conn.sendall(reply)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{srv.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(5)
        for c in conns:
            c.close()
        srv.close()


@pytest.fixture(params=["garbage", "silent"])
def not_ray_server(request):
    """Answers garbage or says nothing."""
    with _server(b"HTTP/1.1 400 Bad Request\r\n\r\nnot ray\n" if request.param == "garbage" else b"") as address:
        yield request.param, address


def test_a_port_that_answers_but_is_not_ray_fails_within_the_timeout(not_ray_server, capsys):
    """ray.init alone kept retrying such a port for minutes past --timeout-s."""
    kind, address = not_ray_server
    t0 = time.monotonic()
    assert main(["train", "--runtime", "ray", "--address", address, "--timeout-s", "2"]) == 2
    elapsed = time.monotonic() - t0
    err = capsys.readouterr().err
    assert elapsed < 2 + 2, elapsed
    assert err.startswith(f"error: no Ray cluster at {address}: the port answers but") and err.count("\n") == 1, err
    assert ("sent nothing" in err) == (kind == "silent")


@pytest.mark.ray
def test_a_real_ray_cluster_passes_the_probe(ray_session):
    t0 = time.monotonic()
    check_address(ray_session.get_runtime_context().gcs_address, 2)
    assert time.monotonic() - t0 < 2


@pytest.fixture
def http2_server_not_ray():
    """Speaks HTTP/2's first frame (an empty SETTINGS) and then nothing: it passes the probe, and
    ray.init retried it past --timeout-s (10 s at least, whatever the timeout)."""
    with _server(bytes([0, 0, 0, 0x4, 0, 0, 0, 0, 0])) as address:
        yield address


def test_an_http2_port_that_is_not_ray_fails_within_the_timeout(http2_server_not_ray):
    """In a child process: the abandoned ray.init must not share this test session's Ray state."""
    address = http2_server_not_ray
    t0 = time.monotonic()
    run = subprocess.run([sys.executable, "-m", "simulator", "train", "--runtime", "ray", "--address", address,
                          "--timeout-s", "2"], capture_output=True, text=True, timeout=120)
    elapsed = time.monotonic() - t0
    assert run.returncode == 2, run.stderr
    first = run.stderr.splitlines()[0]
    assert first == f"error: cannot join the Ray cluster at {address} within 2 s", run.stderr
    assert run.stdout == ""
    # 2 s for the probe and the join together, plus the child's start (imports: ~1-3 s); it was >= 10 s
    assert elapsed < 8, elapsed
