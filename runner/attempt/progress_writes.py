"""How often a worker rewrites a heartbeat file for a handler's progress: promptly, coalesced.

A handler may call ``spool.progress`` thousands of times a second; readers want to see a new value
within a moment, and the file is rewritten at most every ``PROGRESS_WRITE_SECONDS`` for it
(no fsync, like every beat). The first value after a quiet spell is written at once; values that
come faster are coalesced into the newest. Every heartbeat carries the newest value too, so a
beat never wipes what a progress write showed.
"""

from __future__ import annotations

import math
import time

from spool.progress import Progress

PROGRESS_WRITE_SECONDS = 0.25  # at most four progress rewrites a second, besides the beats


class ProgressWrites:
    def __init__(self) -> None:
        self.latest: Progress | None = None
        self._unwritten = False
        self._written_at = -math.inf  # our monotonic clock

    def offer(self, value: Progress | None) -> None:
        """A value from the handler (None: nothing new)."""
        if value is not None and value != self.latest:
            self.latest, self._unwritten = value, True

    def due(self) -> float:
        """When (monotonic) an unwritten value should be written; infinity when none waits."""
        return self._written_at + PROGRESS_WRITE_SECONDS if self._unwritten else math.inf

    def write(self) -> Progress | None:
        """The value for the heartbeat being written now (the newest, or None if none came)."""
        self._unwritten, self._written_at = False, time.monotonic()
        return self.latest
