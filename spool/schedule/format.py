"""A schedule file (``schedules/<name>.yaml``): its format, its slots, and the key of a slot.

A schedule holds either ``cron:`` (5 fields, or 6 with seconds last) with an optional ``tz:``
(an IANA zone, default UTC), or ``every:`` (a duration, a whole number of seconds); the job
template (``task``, ``args``, ``priority``, ``max_tries``, ``timeout``, ``queue``); ``enabled:`` (default
true); ``catchup:`` (``none``, ``one`` (default), ``all``) and ``overlap:`` (``allow`` (default),
``skip``). Any other field, both ``cron`` and ``every``, neither, a zero interval or a template
a submit would refuse is an ``InvalidSchedule``, and such a file fires nothing.

Slots (the instants a schedule fires at, whole seconds):

- ``every: N``: the multiples of N seconds since the Unix epoch (UTC), so every process computes
  the same slots whatever the time it starts: ``every: 1h`` fires on the hour.
- ``cron:`` is read by croniter on the zone's wall clock, and each wall time is turned into an
  instant with ``zoneinfo``. A wall time the spring-forward gap skips (02:30 on the night
  Europe/Berlin jumps from 02:00 to 03:00) fires at the first instant after the gap (03:00
  CEST), once, however many of the schedule's wall times fall in the gap. A wall time the autumn
  overlap repeats (02:30 when 03:00 CEST goes back to 02:00 CET) fires once, at its first
  occurrence (CEST); the repeated hour's wall times do not fire again.

A firing is an ordinary submit keyed ``slot_key(name, slot)``,
``schedule:<name>@<slot, RFC 3339 UTC with milliseconds>``: a slot fires at most once.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from spool.base.errors import InvalidJob, UsageError
from spool.disk.ids import is_valid_id
from spool.job import SCHEDULE_KEY_PREFIX, Job
from spool.settings import parse_duration
from spool.base.timetext import format_time, parse_time
from spool.yaml.safe import load_yaml


__all__ = [
    "CATCHUPS",
    "InvalidSchedule",
    "OVERLAPS",
    "Schedule",
    "parse_schedule",
    "schedule_of_key",
    "slot_key",
    "slot_of_key",
]

CATCHUPS = ("none", "one", "all")
OVERLAPS = ("allow", "skip")
TEMPLATE_FIELDS = ("task", "args", "priority", "max_tries", "timeout", "queue")
SCHEDULE_FIELDS = ("cron", "tz", "every", "enabled", "catchup", "overlap", *TEMPLATE_FIELDS)
MAX_SCHEDULE_BYTES = 64 * 1024


def _croniter() -> Any:
    """croniter's class, imported on first use: ~17 ms that only a cron schedule needs (`spool
    status` and `spool ls` import this module through spool.views.chainview for a job's schedule)."""
    from croniter import croniter  # start-up: ~17 ms, only for cron schedules

    return croniter


KEY_PREFIX = SCHEDULE_KEY_PREFIX
_CHECK_ID = "schedule-template"  # a placeholder id: the template is checked as a submit would


class InvalidSchedule(InvalidJob):
    """A schedule file (or ``spool schedule add``'s flags) that can't be a schedule; it fires nothing."""


@dataclass(frozen=True)
class Schedule:
    name: str
    template: Mapping[str, Any]  # task, args and what else the file gives: a submit's spec
    cron: str | None = None
    tz: str = "UTC"
    every_seconds: int | None = None
    enabled: bool = True
    catchup: str = "one"
    overlap: str = "allow"

    @property
    def expression(self) -> str:
        """How a person reads it: ``cron 0 * * * * (Europe/Berlin)`` or ``every 30s``."""
        if self.cron is not None:
            return f"cron {self.cron}" + (f" ({self.tz})" if self.tz != "UTC" else "")
        return f"every {self.every_seconds}s"

    def next_slot(self, after: float) -> float:
        """The first slot strictly after ``after`` (Unix seconds)."""
        if self.every_seconds is not None:
            return float((math.floor(after) // self.every_seconds + 1) * self.every_seconds)
        assert self.cron is not None
        zone = ZoneInfo(self.tz)
        # Wall times map to instants in order (a gap's to its end, an overlap's to the first
        # pass), so the first wall time after ``after``'s own reading whose instant is later wins.
        wall = datetime.fromtimestamp(after, zone).replace(tzinfo=None)
        times = _croniter()(self.cron, wall)
        while True:
            slot = wall_to_instant(times.get_next(datetime), zone)
            if slot > after:
                return slot

    def last_slot(self, until: float) -> float:
        """The last slot at or before ``until``."""
        if self.every_seconds is not None:
            return float(math.floor(until) // self.every_seconds * self.every_seconds)
        assert self.cron is not None
        zone = ZoneInfo(self.tz)
        wall = datetime.fromtimestamp(math.floor(until) + 1, zone).replace(tzinfo=None)
        # Past an autumn overlap the first pass's wall times read later than now's: start there.
        earlier, now_offset = datetime.fromtimestamp(until - 86400, zone).utcoffset(), wall_offset(until, zone)
        if earlier is not None and now_offset is not None and earlier > now_offset:
            wall += earlier - now_offset
        times = _croniter()(self.cron, wall)
        while True:
            slot = wall_to_instant(times.get_prev(datetime), zone)
            if slot <= until:
                return slot

    def slots(self, after: float, until: float) -> Iterator[float]:
        """Every slot in (``after``, ``until``], in order."""
        slot = self.next_slot(after)
        while slot <= until:
            yield slot
            slot = self.next_slot(slot)

    def spec(self, key: str) -> dict[str, Any]:
        """What one firing submits: the template under the slot's key."""
        return {**self.template, "key": key}


def wall_offset(moment: float, zone: ZoneInfo) -> timedelta | None:
    return datetime.fromtimestamp(moment, zone).utcoffset()


def wall_to_instant(wall: datetime, zone: ZoneInfo) -> float:
    """A wall-clock time in ``zone`` as Unix seconds: its first occurrence in an autumn overlap,
    the first instant after the gap for a time the spring-forward gap skips."""
    first = wall.replace(tzinfo=zone, fold=0)
    instant = first.astimezone(UTC)
    if instant.astimezone(zone).replace(tzinfo=None) == wall:
        return instant.timestamp()
    # In a gap, fold=0 reads it with the offset before the jump (an instant after the gap's
    # end), fold=1 with the one after (an instant before its start): find the jump between.
    low = math.floor(wall.replace(tzinfo=zone, fold=1).timestamp())
    high = math.ceil(instant.timestamp())
    after_offset = datetime.fromtimestamp(high, zone).utcoffset()
    while high - low > 1:
        middle = (low + high) // 2
        if datetime.fromtimestamp(middle, zone).utcoffset() == after_offset:
            high = middle
        else:
            low = middle
    return float(high)


def slot_key(name: str, slot: float) -> str:
    """The idempotency key of one slot: ``schedule:<name>@<slot, RFC 3339 UTC>``."""
    return f"{KEY_PREFIX}{name}@{format_time(slot)}"


def key_prefix(name: str) -> str:
    """What every key of ``name``'s firings starts with."""
    return f"{KEY_PREFIX}{name}@"


def schedule_of_key(key: str) -> str | None:
    """The schedule a job's key says fired it, or None for any other key."""
    if not key.startswith(KEY_PREFIX) or "@" not in key:
        return None
    name = key[len(KEY_PREFIX) :].rsplit("@", 1)[0]
    return name if is_valid_id(name) else None


def slot_of_key(key: str) -> float | None:
    """The slot (Unix seconds) a firing's key names, or None."""
    if schedule_of_key(key) is None:
        return None
    try:
        return parse_time(key.rsplit("@", 1)[1], "slot").timestamp()
    except InvalidJob:
        return None


# -- the file ---------------------------------------------------------------------------------


def parse_schedule(data: bytes, name: str, *, default_max_tries: int, default_timeout: float) -> Schedule:
    """The schedule in ``schedules/<name>.yaml``'s bytes; InvalidSchedule saying what is wrong."""
    where = f"schedules/{name}"
    if not is_valid_id(name):
        shown = name if len(name) <= 64 else f"{name[:64]}..."
        raise InvalidSchedule(
            f"schedules/{shown}: a schedule's name is at most 64 characters of [A-Za-z0-9_-], starting with a "
            f"letter or digit (this one has {len(name)})"
        )
    try:
        fields = load_yaml(data, max_bytes=MAX_SCHEDULE_BYTES, source=where)
    except InvalidJob as err:
        raise InvalidSchedule(str(err)) from None
    if not isinstance(fields, Mapping):
        raise InvalidSchedule(f"{where}: expected a mapping of schedule fields")
    return schedule_of_fields(fields, name, default_max_tries=default_max_tries, default_timeout=default_timeout)


def schedule_of_fields(
    fields: Mapping[Any, Any], name: str, *, default_max_tries: int, default_timeout: float
) -> Schedule:
    where = f"schedules/{name}"
    for field in fields:
        if field not in SCHEDULE_FIELDS:
            raise InvalidSchedule(
                f"{where}: unknown field {str(field)!r}; expected one of {', '.join(SCHEDULE_FIELDS)}"
            )
    template = {field: fields[field] for field in TEMPLATE_FIELDS if field in fields}
    try:
        Job.from_spec(
            template,
            job_id=_CHECK_ID,
            default_max_tries=default_max_tries,
            default_timeout=default_timeout,
            where=where,
        )
    except InvalidJob as err:
        raise InvalidSchedule(str(err)) from None
    cron, every = fields.get("cron"), fields.get("every")
    if (cron is None) == (every is None):
        raise InvalidSchedule(f"{where}: give exactly one of 'cron' and 'every'")
    return Schedule(
        name=name,
        template=template,
        cron=_cron(cron, where) if cron is not None else None,
        tz=_zone(fields.get("tz"), where, cron is not None),
        every_seconds=_every(every, where) if every is not None else None,
        enabled=_choice_bool(fields.get("enabled", True), where),
        catchup=_choice(fields.get("catchup", "one"), CATCHUPS, "catchup", where),
        overlap=_choice(fields.get("overlap", "allow"), OVERLAPS, "overlap", where),
    )


def _cron(value: object, where: str) -> str:
    if not isinstance(value, str) or len(value.split()) not in (5, 6):
        raise InvalidSchedule(f"{where}: field 'cron': expected 5 fields (or 6, seconds last), got {value!r:.60}")
    if not _croniter().is_valid(value):
        raise InvalidSchedule(f"{where}: field 'cron': {value!r:.60} is not a valid cron expression")
    return " ".join(value.split())


def _zone(value: object, where: str, is_cron: bool) -> str:
    if value is None:
        return "UTC"
    if not is_cron:
        raise InvalidSchedule(f"{where}: field 'tz' goes with 'cron' only ('every' counts in UTC seconds)")
    try:
        if isinstance(value, str):
            ZoneInfo(value)
            return value
    except (ZoneInfoNotFoundError, ValueError):
        pass
    raise InvalidSchedule(f"{where}: field 'tz': expected an IANA time zone like 'Europe/Berlin', got {value!r:.60}")


def _every(value: object, where: str) -> int:
    try:
        seconds = parse_duration(value)  # type: ignore[arg-type]  # wrong types are refused inside
    except UsageError as err:
        raise InvalidSchedule(f"{where}: field 'every': {err}") from None
    if seconds < 1 or seconds != int(seconds):
        raise InvalidSchedule(f"{where}: field 'every': expected a whole number of seconds, at least 1s, got {value!r}")
    return int(seconds)


def _choice_bool(value: object, where: str) -> bool:
    if not isinstance(value, bool):
        raise InvalidSchedule(f"{where}: field 'enabled': expected true or false, got {value!r:.60}")
    return value


def _choice(value: object, choices: tuple[str, ...], field: str, where: str) -> str:
    if value not in choices:
        raise InvalidSchedule(f"{where}: field {field!r}: expected one of {', '.join(choices)}, got {value!r:.60}")
    return str(value)
