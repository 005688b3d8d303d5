"""A full disk pauses a process of the runner, never ends it (README: "A full disk pauses, never
costs a try"): exiting would not make room, and a supervisor that sees the same exit again and
again gives up, stopping workers that hold finished attempts. ``DiskFullPause`` says so once when
an episode starts, a line a minute while it lasts and once when there is room again, and hands out
the backoff between tries (0.2 s doubling to ``max_seconds``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

MAX_BACKOFF_SECONDS = 5.0
REMIND_SECONDS = 60.0


class DiskFullPause:
    def __init__(
        self,
        log: logging.Logger,
        who: str,
        *,
        max_seconds: float = MAX_BACKOFF_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.log, self.who, self.max_seconds, self.clock = log, who, max_seconds, clock
        self.since: float | None = None  # our clock, while the episode lasts
        self._reminded = 0.0
        self._delay = 0.0

    def met(self, what: str) -> float:
        """Book one more refusal of the disk (``what`` says what waits); returns how long to wait."""
        now = self.clock()
        if self.since is None:
            self.since = self._reminded = now
            self.log.warning("%s: the spool's disk is full; %s (retrying with a backoff)", self.who, what)
        elif now - self._reminded >= REMIND_SECONDS:
            self._reminded = now
            self.log.warning("%s: the spool's disk is still full after %.0fs; %s", self.who, now - self.since, what)
        self._delay = min(max(self._delay * 2, 0.2), self.max_seconds)
        return self._delay

    def cleared(self, what: str) -> None:
        """The disk took a write again: end the episode (one line) and reset the backoff."""
        if self.since is not None:
            self.log.info("%s: the disk has room again; %s", self.who, what)
            self.since, self._delay = None, 0.0
