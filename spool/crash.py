"""Crash points: ``SPOOL_CRASH_AT=<role>:<step>`` makes the process SIGKILL itself there.

Every step of every transition calls ``point(step)``; the process declares its role once at start
(``arm(role, environ)``): ``submit``, ``worker``, ``coordinator``, ``serve``, and ``admin`` for the
commands a person runs to cancel, requeue or purge. Unarmed, a point is one comparison against
``None``. ``CRASH_POINTS`` is the
list ``spool crash-points`` prints; a test checks every ``point()`` call in the source is listed,
and the crash matrix runs every listed point.
"""

from __future__ import annotations

import difflib
import os
import signal
from collections.abc import Mapping

# role -> the steps that role's process can reach, in the order a transition reaches them.
CRASH_POINTS: dict[str, tuple[str, ...]] = {}

_target: str | None = None
_role: str | None = None


def register(role: str, *steps: str) -> None:
    """Declare steps a role can reach (called at import by the module that owns the steps)."""
    CRASH_POINTS[role] = tuple(dict.fromkeys(CRASH_POINTS.get(role, ()) + steps))


def all_points() -> list[str]:
    return [f"{role}:{step}" for role, steps in CRASH_POINTS.items() for step in steps]


def arm(role: str, environ: Mapping[str, str]) -> None:
    """Set this process's role and read ``SPOOL_CRASH_AT`` once."""
    global _target, _role
    _role = role
    target = environ.get("SPOOL_CRASH_AT") or None
    _target = target.split(":", 1)[1] if target and target.split(":", 1)[0] == role else None


def unknown_target(value: str) -> str | None:
    """A warning if ``value`` (a SPOOL_CRASH_AT) names no listed point, else None.

    Only meaningful once every module that registers points is imported (the CLI does that,
    and only when SPOOL_CRASH_AT is set, so an unset variable still costs nothing).
    """
    points = all_points()
    if value in points:
        return None
    close = difflib.get_close_matches(value, points, n=1)
    role = value.split(":", 1)[0]
    hint = f"; did you mean {close[0]}?" if close else (
        f"; {role} has {', '.join(CRASH_POINTS[role])}" if CRASH_POINTS.get(role) else "")
    return f"SPOOL_CRASH_AT={value} is not a crash point{hint} (see `spool crash-points`)"


def disarm() -> None:
    global _target
    _target = None


def point(step: str) -> None:
    """SIGKILL this process if it was armed for ``step``."""
    if _target is None or _target != step:
        return
    os.kill(os.getpid(), signal.SIGKILL)
