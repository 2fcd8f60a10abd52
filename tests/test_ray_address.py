"""A dead or malformed Ray address fails fast with one line (ray.init alone retried for 928 s)."""

import socket
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
