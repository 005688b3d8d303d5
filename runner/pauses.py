"""Whether the coordinator was stopped (SIGSTOP, a frozen cgroup, a paused VM), as opposed to busy.

docs/reliability.md ("4. Leases"): a coordinator that was paused gives every lease a fresh full
term, since nobody could heartbeat into its view. A coordinator that was only busy (10,000
schedules firing, a reconcile of 100k jobs, a big ingest) was not paused: its workers went on
beating, and a lease whose counter did not change across the term has really missed it. The gap
between two passes can't tell the two apart; a ticker thread can. It reads the clock every
``TICK_SECONDS`` beside whatever the loop does (a busy main thread hands it the GIL within
milliseconds, and the sqlite3 and file calls release it), so a gap between two of its readings
over the threshold means that no thread of this process ran at all.

Without the thread (``start`` never called: a test driving ``run_pass`` on a fake clock) each
``take`` is a reading itself, so the rule falls back to the gap between two lease watches.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

TICK_SECONDS = 0.1


class PauseWatch:
    def __init__(self, threshold_seconds: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.threshold = threshold_seconds
        self.clock = clock
        self._lock = threading.Lock()
        self._last: float | None = None  # the newest reading
        self._found = 0.0  # the longest pause the ticker saw that nobody took yet
        self._taken_from = -math.inf  # the reading a pause was taken from: never reported twice
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._note(self.clock())
        self._thread = threading.Thread(target=self._tick, name="pause-watch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def take(self, now: float) -> float | None:
        """How long the longest pause since the last ``take`` lasted, or None if there was none.

        RACE: after a SIGCONT the main thread may get here before the ticker has run again; the
        ticker's stale reading is then the pause itself, and is taken from here (once)."""
        if self._thread is None:
            self._note(now)
        with self._lock:
            found, self._found = self._found, 0.0
            if self._last is not None and now - self._last > self.threshold and self._last > self._taken_from:
                found = max(found, now - self._last)
                self._taken_from = self._last
        return found or None

    def _tick(self) -> None:
        while not self._stop.wait(TICK_SECONDS):
            self._note(self.clock())

    def _note(self, now: float) -> None:
        with self._lock:
            if self._last is not None and now - self._last > self.threshold and self._last > self._taken_from:
                self._found = max(self._found, now - self._last)
            self._last = max(now, self._last or now)
