"""What a schedule has fired, kept in the files: ``schedules/.<name>.fired`` (and ``.firing``).

"A slot fires at most once whatever restarts, crashes or a second coordinator do" can't rest on
the slot's job (``spool purge`` removes it with its key) nor on the ledger (an index that may be
lost or rebuilt), so the coordinator writes each schedule's last firing beside it:

    .<name>.fired:   slot: 2026-01-01T10:00:00.000Z   # the last slot fired
                     job: 01JDZ8Q3V7K2M4N5P6R7S8T9VW  # its job (absent: the key was another job's)
    .<name>.firing:  firing: 2026-01-01T11:00:00.000Z # the slot whose firing began last

A firing of slot S is three steps:

1. begin: ``.firing`` says S (staged in tmp/, renamed over; no fsync: a hint, see below; crash
   point ``coordinator:fire-after-begin``);
2. the keyed submit of S (submit's own crash points; the job is durable when it returns);
3. record: ``.fired`` says S and its job (staged and fsync'd, renamed over; crash point
   ``coordinator:fire-after-record``). schedules/ is fsync'd once at the end of the pass
   (``sync``), before the pass returns: one fsync covers every firing of a pass.

A crash before 1 is undone: nothing was written, and S is a missed slot that ``catchup`` decides.
A crash between 1 and 3 is finished by the next coordinator: ``.firing`` ahead of ``.fired``
means S began, so it fires S again, whatever the catchup, and S's key makes that the one job. A
power cut may lose step 1 (then S is a missed slot, as if the crash came before it; its job, if
made, is found by its key when catchup fires S) but never tears ``.fired``: it is always whole
before its rename. After 3 no coordinator fires S or an earlier slot again, whatever happened to
the job or the ledger. A coordinator killed between 2 and 3 leaves the slot's job (and its key)
as the only evidence that S fired; ``spool purge`` removes both, so before it removes such a job
it finishes the record itself (``record_before_purge``: ``.fired`` says S, fsync'd, then crash
point ``admin:purge-after-fired``; a purge killed there leaves the job for the next purge).

The files are the coordinator's; ``spool schedule run`` notes its run in ``.fired`` too (read,
then replaced: a coordinator's record at the same instant may win, which costs only what ``list``
shows). None means "never fired" (a new schedule, or one that ``spool schedule rm`` removed with
its files); one that does not parse is logged and read as none. Their names start with a dot,
so neither is ever read as a schedule.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from spool.base import crash
from spool.base.errors import InvalidJob
from spool.disk.fsio import fs
from spool.disk.ids import is_valid_id
from spool.disk.layout import SCHEDULES, schedule_file_name
from spool.schedule.format import schedule_of_key, slot_of_key
from spool.moves.store import stage, unstage
from spool.base.timetext import format_time, parse_time
from spool.yaml.safe import dump_yaml, load_yaml

if TYPE_CHECKING:
    from spool.handle import Handle

log = logging.getLogger("spool.schedule.format")

MAX_FIRED_BYTES = 4096
SUFFIX, BEGUN_SUFFIX = ".fired", ".firing"


@dataclass(frozen=True)
class Fired:
    """A schedule's record: the last slot fired (and its job), and the last firing begun, if any."""

    slot: float | None = None
    job: str | None = None
    firing: float | None = None

    @property
    def unfinished(self) -> float | None:
        """The slot whose firing began and never ended (a crash cut it short), if any."""
        if self.firing is not None and (self.slot is None or self.firing > self.slot):
            return self.firing
        return None


def fired_file_name(name: str) -> str:
    return f".{name}{SUFFIX}"


def begun_file_name(name: str) -> str:
    return f".{name}{BEGUN_SUFFIX}"


def read_fired(sp: Handle, name: str) -> Fired:
    """``name``'s record; an empty one when there is none (or it is broken: logged)."""
    fields = _read(sp, fired_file_name(name), name)
    begun = _read(sp, begun_file_name(name), name)
    where = f"schedules/{fired_file_name(name)}"
    try:
        slot, job = _time(fields.get("slot"), where), _job(fields.get("job"), where)
    except InvalidJob as err:
        log.warning("schedule %s: its record of firings is unreadable, read as none: %s", name, err)
        slot, job = None, None
    try:
        firing = _time(begun.get("firing"), f"schedules/{begun_file_name(name)}")
    except InvalidJob:
        firing = None  # a hint a power cut tore: as if the firing never began
    return Fired(slot, job, firing)


def begin(sp: Handle, name: str, slot: float) -> None:
    """Step 1 of a firing: ``slot`` is being fired (a hint, not fsync'd: see the module doc)."""
    _write(sp, begun_file_name(name), {"firing": format_time(slot)}, sync=False)
    crash.point("fire-after-begin")


def record(sp: Handle, name: str, slot: float, job: str | None) -> None:
    """Step 3 of a firing: ``slot`` fired, as ``job`` (None: its key was another job's). Durable
    once ``sync`` has run (the coordinator calls it at the end of its pass)."""
    _write(sp, fired_file_name(name), _fields(slot, job), sync=True)
    crash.point("fire-after-record")


def record_before_purge(sp: Handle, key: str, job: str) -> None:
    """``spool purge`` is about to remove ``job``, keyed ``key``: if that is a schedule's slot its
    record does not cover yet (a coordinator died between the slot's submit and its record), the
    record says so first, durably, as the next coordinator would have written it."""
    name, slot = schedule_of_key(key), slot_of_key(key)
    if name is None or slot is None or not fs.exists(sp.layout.fd(SCHEDULES), schedule_file_name(name)):
        return  # not a slot's job, or its schedule was removed (with its record)
    before = read_fired(sp, name)
    if before.slot is not None and before.slot >= slot:
        return  # the usual case: recorded when it fired
    _write(sp, fired_file_name(name), _fields(slot, job), sync=True)
    sync(sp)
    crash.point("purge-after-fired")


def sync(sp: Handle) -> None:
    """Make the records renamed into schedules/ since the last call durable."""
    fs.fsync_dir(sp.layout.fd(SCHEDULES))


def note_run(sp: Handle, name: str, moment: float, job: str) -> None:
    """``spool schedule run``: its job, keyed to ``moment``, is the schedule's last firing (a slot
    before it fires no more, as a key past it did when the ledger was the record). A record ahead
    of ``moment`` (a clock stepped back) stays."""
    before = read_fired(sp, name)
    if before.slot is not None and before.slot > moment:
        return
    _write(sp, fired_file_name(name), _fields(moment, job), sync=True)
    sync(sp)
    crash.point("run-after-record")


def forget(sp: Handle, name: str) -> None:
    """Remove ``name``'s record (``spool schedule rm``): a schedule added again starts fresh."""
    folder = sp.layout.fd(SCHEDULES)
    fs.unlink(folder, fired_file_name(name), missing_ok=True)
    fs.unlink(folder, begun_file_name(name), missing_ok=True)
    fs.fsync_dir(folder)


def _fields(slot: float, job: str | None) -> dict[str, Any]:
    return {"slot": format_time(slot), **({"job": job} if job is not None else {})}


def _read(sp: Handle, file_name: str, name: str) -> Mapping[str, Any]:
    try:
        data = fs.read_file(sp.layout.fd(SCHEDULES), file_name, MAX_FIRED_BYTES)
        fields = load_yaml(data, max_bytes=MAX_FIRED_BYTES, source=f"schedules/{file_name}")
    except FileNotFoundError:
        return {}
    except InvalidJob as err:
        if file_name == fired_file_name(name):
            log.warning("schedule %s: its record of firings is unreadable, read as none: %s", name, err)
        return {}
    return fields if isinstance(fields, Mapping) else {}


def _write(sp: Handle, file_name: str, fields: Mapping[str, Any], *, sync: bool) -> None:
    """Staged in tmp/ (fsync'd when ``sync``), renamed over ``file_name`` in schedules/."""
    staged = stage(sp, dump_yaml(dict(fields)), sync=sync)
    try:
        fs.rename_replace(sp.layout.fd("tmp"), staged, sp.layout.fd(SCHEDULES), file_name)
    except BaseException:
        unstage(sp, staged)  # renamed, it is gone from tmp/: no unlink to pay per firing
        raise


def _time(value: object, where: str) -> float | None:
    return None if value is None else parse_time(value, f"{where}: slot").timestamp()


def _job(value: object, where: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not is_valid_id(value):
        raise InvalidJob(f"{where}: field 'job': not a job id")
    return value


__all__ = ["Fired", "begin", "begun_file_name", "fired_file_name", "forget", "note_run", "read_fired", "record", "sync"]
