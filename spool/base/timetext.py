"""Time as a job file writes it: RFC 3339 in UTC with milliseconds (2026-11-30T12:00:00.000Z).

``format_time`` writes it, ``parse_time`` reads it back (any zone, refusing a time without one),
``now_text`` is the clock's wall time written so.
"""

from __future__ import annotations

from datetime import datetime, UTC

from spool.base.clock import SYSTEM, Clock
from spool.base.errors import InvalidJob

__all__ = ["format_time", "now_text", "parse_time"]


def format_time(moment: float | datetime) -> str:
    """RFC 3339 UTC with milliseconds: 2026-11-30T12:00:00.000Z.

    The year has four digits even before 1000 (``strftime("%Y")`` writes 999, which no RFC 3339
    reader, ``parse_time`` included, reads back).
    """
    if isinstance(moment, datetime):
        moment = moment.astimezone(UTC)
    else:
        moment = datetime.fromtimestamp(moment, tz=UTC)
    return (
        f"{moment.year:04d}-{moment.month:02d}-{moment.day:02d}"
        f"T{moment.hour:02d}:{moment.minute:02d}:{moment.second:02d}.{moment.microsecond // 1000:03d}Z"
    )


def now_text(clock: Clock = SYSTEM) -> str:
    """The clock's wall time as a job file writes it (``format_time``). spool/ passes its own."""
    return format_time(clock.wall())


def parse_time(value: object, where: str) -> datetime:
    if isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value.strip().replace("z", "Z"))
        except ValueError:
            moment = None
        if moment is not None and moment.tzinfo is not None:
            return moment.astimezone(UTC)
    raise InvalidJob(f"{where}: expected an RFC 3339 time with a zone like '2026-11-30T12:00:00Z', got {_show(value)}")


def _show(value: object) -> str:  # as spool.job shows a value in an error
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
