"""Refuse a Ray address before `ray.init` can hang on it: one line, within the caller's bound.

`ray.init(address=...)` retries for many minutes on an address nobody answers on (928 s measured)
and for minutes more on a port that answers but is not Ray. So `check_address`, within
`timeout_s` (default 10 s) in all:
1. parses HOST:PORT ('auto' and 'local' pass as they are);
2. opens a TCP connection;
3. speaks the first bytes of HTTP/2, the transport of gRPC, which Ray's GCS server is: the client
   connection preface followed by an empty SETTINGS frame (RFC 9113, sections 3.4 and 6.5), and
   expects the server's own SETTINGS frame (type 0x4 on stream 0) as its first frame, as every
   HTTP/2 server must send. A port that sends anything else, closes, or stays silent is not a Ray
   cluster. (With RAY_USE_TLS set the GCS speaks TLS first: step 3 is skipped.)
No ray import here: this runs before Ray does.
"""

from __future__ import annotations

import os
import socket
import time

from ..errors import ParasimError

HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"  # RFC 9113 section 3.4
EMPTY_SETTINGS = bytes([0, 0, 0, 0x4, 0, 0, 0, 0, 0])  # length 0, type SETTINGS, no flags, stream 0
DEFAULT_WAIT_S = 10.0


def parse_address(address: str) -> tuple[str, int]:
    """'HOST:PORT' (optionally 'ray://HOST:PORT', '[v6]:PORT') -> (host, port), or one line."""
    text = address.split("://", 1)[1] if "://" in address else address
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ParasimError(f"Ray address {address!r} is not HOST:PORT (e.g. 127.0.0.1:6379), 'auto' or 'local'")
    return host.strip("[]"), int(port)


def check_address(address: str, timeout_s: float | None = None) -> None:
    """Refuse a malformed Ray address, one nobody answers on, or one that answers but is not a Ray
    GCS server, in one line within timeout_s (default 10 s)."""
    if address in ("auto", "local"):
        return
    host, port = parse_address(address)
    wait = DEFAULT_WAIT_S if timeout_s is None else float(timeout_s)
    deadline = time.monotonic() + wait
    try:
        sock = socket.create_connection((host, port), timeout=wait)
    except OSError as e:
        why = "timed out" if isinstance(e, TimeoutError) else (e.strerror or str(e))
        raise ParasimError(f"cannot reach the Ray cluster at {address} within {wait:g} s: {why}") from None
    with sock:
        if os.environ.get("RAY_USE_TLS", "0").lower() in ("1", "true"):
            return
        head = _first_frame_header(sock, deadline)
    if len(head) == 9 and head[3] == 0x4 and int.from_bytes(head[5:9], "big") & 0x7FFFFFFF == 0:
        return
    what = ("sent nothing" if not head else f"sent {head[:9]!r}, not an HTTP/2 SETTINGS frame")
    raise ParasimError(f"no Ray cluster at {address}: the port answers but {what} within {wait:g} s "
                       f"(Ray's GCS speaks gRPC over HTTP/2)")


def _first_frame_header(sock: socket.socket, deadline: float) -> bytes:
    """Send the HTTP/2 preface + SETTINGS; read the 9-byte header of the server's first frame
    (fewer bytes if it closes, stays silent until the deadline, or the connection breaks)."""
    head = b""
    try:
        sock.settimeout(max(deadline - time.monotonic(), 0.01))
        sock.sendall(HTTP2_PREFACE + EMPTY_SETTINGS)
        while len(head) < 9:
            sock.settimeout(max(deadline - time.monotonic(), 0.01))
            data = sock.recv(9 - len(head))
            if not data:
                break
            head += data
    except OSError:  # timed out, reset: whatever arrived is judged below
        pass
    return head
