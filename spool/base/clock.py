"""Time and chance, in one place: every reading of a clock or a random draw in spool/ goes through a
``Clock``, so a test can drive time by hand and a transition's decisions are repeatable.

``wall()`` is seconds since the epoch (what job files record and ``not_before`` compares with);
``monotonic()`` measures waits and never steps back; ``sleep()`` pauses for a poll; ``jitter()``
spreads retries so they don't move in lockstep. ``SYSTEM`` is the real one; ``FakeClock`` stands
still until a test moves it.
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def wall(self) -> float: ...

    def monotonic(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...

    def jitter(self, low: float, high: float) -> float: ...


class SystemClock:
    """The host's clocks and a process-wide random source."""

    def wall(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(max(0.0, seconds))

    def jitter(self, low: float, high: float) -> float:
        import random  # start-up: only a backoff draws a jitter; a submit never does (~2 ms)

        return random.uniform(low, high)


SYSTEM: Clock = SystemClock()


class FakeClock:
    """A clock that moves only when told: ``sleep`` and ``advance`` move both readings together.

    ``jitter`` returns the low end plus ``fraction`` of the span (default: the midpoint), so a
    test can pin the backoff it expects.
    """

    def __init__(self, wall: float = 1_800_000_000.0, *, fraction: float = 0.5) -> None:
        self._wall = wall
        self._monotonic = 1000.0
        self.fraction = fraction

    def wall(self) -> float:
        return self._wall

    def monotonic(self) -> float:
        return self._monotonic

    def sleep(self, seconds: float) -> None:
        self.advance(max(0.0, seconds))

    def advance(self, seconds: float) -> None:
        self._wall += seconds
        self._monotonic += seconds

    def set_wall(self, wall: float) -> None:
        """Step the wall clock alone (as an NTP correction does); monotonic time is untouched."""
        self._wall = wall

    def jitter(self, low: float, high: float) -> float:
        return low + (high - low) * self.fraction
