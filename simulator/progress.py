"""Progress of long work, on stderr (the command line's; library calls take a `progress(done, total)`
callback and print nothing themselves).

On a terminal, one line redrawn in place: `training [#######.......] 3/12 steps`. Elsewhere (a log,
a pipe, a test), plain lines, the first after QUIET_S of work and then at most one every EVERY_S,
so short work prints nothing and long work shows that it moves.
"""

from __future__ import annotations

import sys
import time

QUIET_S = 5.0   # work shorter than this prints no progress off a terminal
EVERY_S = 5.0   # and longer work at most one line this often
WIDTH = 30


class Progress:
    """`Progress("training", "steps")(done, total)`: report `done` of `total` units of work."""

    def __init__(self, what: str, unit: str = "", stream=None):
        self.what, self.unit = what, unit
        self.stream = stream if stream is not None else sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.start = time.monotonic()
        self.last = None   # when a plain line was last written

    def __call__(self, done: int, total: int, note: str = "") -> None:
        tail = f" {done}/{total}" + (f" {self.unit}" if self.unit else "") + (f" ({note})" if note else "")
        if self.tty:
            filled = WIDTH * done // max(total, 1)
            self.stream.write(f"\r{self.what} [{'#' * filled}{'.' * (WIDTH - filled)}]{tail}")
            if done >= total:
                self.stream.write("\n")
        else:
            now = time.monotonic()
            due = now - self.start >= QUIET_S and (self.last is None or now - self.last >= EVERY_S)
            if not (due or (done >= total and self.last is not None)):
                return
            self.last = now
            self.stream.write(f"{self.what}:{tail}\n")
        self.stream.flush()
