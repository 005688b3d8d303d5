"""What a schedule has fired, kept in the files: ``schedules/.<name>.fired``.

"A slot fires at most once whatever restarts, crashes or a second coordinator do" can't rest on
the slot's job (``spool purge`` removes it with its key) nor on the ledger (an index that may be
lost or rebuilt), so each schedule's last firing is written here, durably, by the coordinator:

    slot: 2026-01-01T10:00:00.000Z    # the last slot whose firing ended
    job: 01JDZ8Q3V7K2M4N5P6R7S8T9VW   # that firing's job (absent: the key was held by another job)
    firing: 2026-01-01T11:00:00.000Z  # only between the two writes of one firing

A firing of slot S is three steps, each write staged in tmp/ (fsync'd), renamed over the file and
followed by an fsync of schedules/:

1. begin: ``firing: S`` beside the previous ``slot`` (crash point ``coordinator:fire-after-begin``);
2. the keyed submit of S (submit's own crash points);
3. record: ``slot: S``, ``job: <id>`` (crash point ``coordinator:fire-after-record``).

A crash before 1 is undone: nothing was written, and S is a missed slot that ``catchup`` decides.
A crash between 1 and 3 is finished by the next coordinator: it fires S again, whatever the
catchup, and S's key makes that the one job. After 3 no coordinator fires S or an earlier slot
again, whatever happened to the job or the ledger. (One case remains open: a coordinator killed
between 2 and 3 whose job is then purged before any coordinator starts again; the next one fires
S a second time, as it can't tell that from a crash before the submit.)

The file is the coordinator's (``spool schedule run`` notes its run there too, read, then replaced:
a coordinator's write at the same instant may win, which costs only what ``list`` shows). A
missing one means "never fired" (a new schedule, or one that
``spool schedule rm`` removed with its file), and one that does not parse is reported and read as
missing. The name starts with a dot, so it is never read as a schedule.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from spool import crash
from spool.errors import InvalidJob
from spool.fsio import fs
from spool.ids import is_valid_id
from spool.layout import SCHEDULES
from spool.store import stage, unstage
from spool.timetext import format_time, parse_time
from spool.yamlsafe import dump_yaml, load_yaml

if TYPE_CHECKING:
    from spool.handle import Handle

log = logging.getLogger("spool.schedules")

MAX_FIRED_BYTES = 4096
SUFFIX = ".fired"


@dataclass(frozen=True)
class Fired:
    """A schedule's record: the last slot fired (and its job), and a firing begun, if any."""

    slot: float | None = None
    job: str | None = None
    firing: float | None = None


def fired_file_name(name: str) -> str:
    return f".{name}{SUFFIX}"


def read_fired(sp: Handle, name: str) -> Fired:
    """``name``'s record; an empty one when there is none (or it is broken: logged)."""
    try:
        data = fs.read_file(sp.layout.fd(SCHEDULES), fired_file_name(name), MAX_FIRED_BYTES)
    except FileNotFoundError:
        return Fired()
    where = f"schedules/{fired_file_name(name)}"
    try:
        fields = load_yaml(data, max_bytes=MAX_FIRED_BYTES, source=where)
        if not isinstance(fields, Mapping):
            raise InvalidJob(f"{where}: expected a mapping")
        return Fired(
            slot=_time(fields.get("slot"), where),
            job=_job(fields.get("job"), where),
            firing=_time(fields.get("firing"), where),
        )
    except InvalidJob as err:
        log.warning("schedule %s: its record of firings is unreadable, read as none: %s", name, err)
        return Fired()


def begin(sp: Handle, name: str, before: Fired, slot: float) -> Fired:
    """Step 1 of a firing: ``slot`` is being fired (durable before its submit)."""
    began = Fired(before.slot, before.job, slot)
    _write(sp, name, began)
    crash.point("fire-after-begin")
    return began


def record(sp: Handle, name: str, slot: float, job: str | None) -> Fired:
    """Step 3 of a firing: ``slot`` fired, as ``job`` (None: its key was another job's)."""
    done = Fired(slot, job, None)
    _write(sp, name, done)
    crash.point("fire-after-record")
    return done


def note_run(sp: Handle, name: str, moment: float, job: str) -> None:
    """``spool schedule run``: its job, keyed to ``moment``, is the schedule's last firing (a slot
    before it fires no more, as a key past it did when the ledger was the record). A firing the
    coordinator has begun stays begun; a record ahead of ``moment`` (a clock stepped back) stays."""
    before = read_fired(sp, name)
    if before.slot is not None and before.slot > moment:
        return
    _write(sp, name, Fired(moment, job, before.firing))
    crash.point("run-after-record")


def forget(sp: Handle, name: str) -> None:
    """Remove ``name``'s record (``spool schedule rm``): a schedule added again starts fresh."""
    folder = sp.layout.fd(SCHEDULES)
    fs.unlink(folder, fired_file_name(name), missing_ok=True)
    fs.fsync_dir(folder)


def _write(sp: Handle, name: str, fired: Fired) -> None:
    fields: dict[str, Any] = {}
    if fired.slot is not None:
        fields["slot"] = format_time(fired.slot)
    if fired.job is not None:
        fields["job"] = fired.job
    if fired.firing is not None:
        fields["firing"] = format_time(fired.firing)
    staged = stage(sp, dump_yaml(fields), sync=True)
    folder = sp.layout.fd(SCHEDULES)
    try:
        fs.rename_replace(sp.layout.fd("tmp"), staged, folder, fired_file_name(name))
    finally:
        unstage(sp, staged)
    fs.fsync_dir(folder)


def _time(value: object, where: str) -> float | None:
    return None if value is None else parse_time(value, f"{where}: slot").timestamp()


def _job(value: object, where: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not is_valid_id(value):
        raise InvalidJob(f"{where}: field 'job': not a job id")
    return value


__all__ = ["Fired", "begin", "fired_file_name", "forget", "note_run", "read_fired", "record"]
