"""``schedules/`` on disk: read every schedule file, write one atomically, fire a slot.

Writes (``add``, ``set_enabled``) stage the whole file in tmp/ (fsync'd), rename it into
schedules/ (without replace for ``add``, replacing for enable/disable) and fsync schedules/: a
crash leaves the old file or the new one, never a torn one, and a staged leftover in tmp/ is
swept with the other staging files. ``remove`` unlinks and fsyncs the folder. A person may
also write a file by hand, atomically or not: a torn one reads as broken until it is whole.

A firing (``fire``) is one ordinary submit keyed ``schedule:<name>@<slot>`` (never refused by
backpressure). What a crash leaves is what a crashed keyed submit leaves: at most a key
reserved without a job, which the next firing of the same slot takes over, or the job, which
the next firing finds by its key. Either way the next coordinator, or ``spool schedule run``
for a slot keyed to now, finishes or repeats it, and a slot never makes two jobs.

The last slot fired is in the files too, in ``schedules/.<name>.fired``, which the coordinator
writes around each firing (spool.schedule.fired): neither a purge of the job nor a lost ledger can make
a slot fire again. A file in schedules/ that is not ``<name>.yaml`` (``x.yml``, ``x``) is no
schedule: ``ignored`` says so, for the coordinator's log, ``spool schedule list`` and fsck.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from spool.base.errors import InvalidJob, NotFound
from spool.schedule.fired import forget, note_run, read_fired
from spool.disk.fsio import fs
from spool.disk.layout import SCHEDULES, is_ignored_name, schedule_file_name, schedule_of_file_name
from spool.schedule.format import (
    MAX_SCHEDULE_BYTES,
    InvalidSchedule,
    Schedule,
    parse_schedule,
    schedule_of_fields,
    slot_key,
)
from spool.moves.store import stage, state_of, unstage
from spool.moves.submission import Submitted, submit
from spool.base.timetext import format_time
from spool.yaml.safe import dump_yaml, load_yaml

if TYPE_CHECKING:
    from spool.handle import Handle

log = logging.getLogger("spool.schedule.format")


@dataclass(frozen=True)
class Entry:
    """One file in schedules/: its schedule, or the error that keeps it from being one."""

    name: str
    signature: tuple[int, ...]  # inode, size, mtime and ctime: a change means read it again
    schedule: Schedule | None
    error: str | None
    written: float  # the file's mtime: slots before it were never this file's to fire


@dataclass(frozen=True)
class LastFired:
    slot: float
    job_id: str | None  # None: the slot's key was held by a job this schedule did not make


def entries(sp: Handle, known: Mapping[str, Entry] | None = None) -> dict[str, Entry]:
    """Every schedule file by name, reusing ``known`` entries whose file has not changed."""
    folder = sp.layout.fd(SCHEDULES)
    found: dict[str, Entry] = {}
    for file_name in sorted(fs.list_dir(folder)):
        name = schedule_of_file_name(file_name)
        if not name:
            continue
        info = fs.lstat(folder, file_name)
        if info is None:
            continue  # removed since the listing
        signature = (info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
        old = (known or {}).get(name)
        found[name] = old if old is not None and old.signature == signature else _read(sp, name, signature, info)
    return found


def ignored(sp: Handle) -> dict[str, str]:
    """The files in schedules/ that are no schedule, each with why (dot-files and ``*.tmp`` are
    the runner's and in-progress writes: left out)."""
    found: dict[str, str] = {}
    for file_name in sorted(fs.list_dir(sp.layout.fd(SCHEDULES))):
        if is_ignored_name(file_name) or schedule_of_file_name(file_name):
            continue
        stem = file_name.rsplit(".", 1)[0] if "." in file_name else file_name
        found[file_name] = f"schedules/{file_name} is ignored: a schedule's file is named <name>.yaml" + (
            f" (rename it {stem}.yaml)" if stem else ""
        )
    return found


def _read(sp: Handle, name: str, signature: tuple[int, ...], info: os.stat_result) -> Entry:
    try:
        schedule: Schedule | None = read_schedule(sp, name)
        error = None
    except (InvalidJob, FileNotFoundError) as err:
        schedule, error = None, str(err) if isinstance(err, InvalidJob) else "removed while read"
    return Entry(name, signature, schedule, error, info.st_mtime)


def read_schedule(sp: Handle, name: str) -> Schedule:
    """``schedules/<name>.yaml`` as a Schedule; InvalidSchedule (a broken file) or FileNotFoundError."""
    data = fs.read_file(sp.layout.fd(SCHEDULES), schedule_file_name(name), MAX_SCHEDULE_BYTES)
    return parse_schedule(
        data, name, default_max_tries=sp.settings.max_tries, default_timeout=sp.settings.default_timeout_seconds
    )


def _fields(sp: Handle, name: str) -> dict[str, Any]:
    try:
        data = fs.read_file(sp.layout.fd(SCHEDULES), schedule_file_name(name), MAX_SCHEDULE_BYTES)
    except FileNotFoundError:
        raise NotFound(f"no schedule {name!r} (schedules/{schedule_file_name(name)})") from None
    fields = load_yaml(data, max_bytes=MAX_SCHEDULE_BYTES, source=f"schedules/{name}")
    if not isinstance(fields, dict):
        raise InvalidSchedule(f"schedules/{name}: expected a mapping of schedule fields; fix the file by hand")
    return fields


# -- writes -----------------------------------------------------------------------------------


def add(sp: Handle, name: str, fields: Mapping[str, Any]) -> Schedule:
    """Write a new ``schedules/<name>.yaml``; InvalidSchedule if the fields are not a schedule,
    InvalidSchedule too if the name is taken (``rm`` it first)."""
    schedule = _check(sp, name, fields)
    try:
        _write(sp, name, fields, replace=False)
    except FileExistsError:
        raise InvalidSchedule(f"schedule {name!r} exists; `spool schedule rm {name}` first") from None
    return schedule


def set_enabled(sp: Handle, name: str, enabled: bool) -> Schedule:
    """Rewrite ``schedules/<name>.yaml`` with ``enabled:`` set (NotFound if there is none)."""
    fields = _fields(sp, name)
    fields["enabled"] = enabled
    schedule = _check(sp, name, fields)
    _write(sp, name, fields, replace=True)
    return schedule


def remove(sp: Handle, name: str) -> None:
    folder = sp.layout.fd(SCHEDULES)
    try:
        fs.unlink(folder, schedule_file_name(name))
    except FileNotFoundError:
        raise NotFound(f"no schedule {name!r} (schedules/{schedule_file_name(name)})") from None
    fs.fsync_dir(folder)
    forget(sp, name)  # after the file: a crash between leaves a record no schedule reads


def _check(sp: Handle, name: str, fields: Mapping[str, Any]) -> Schedule:
    data = dump_yaml(dict(fields))
    return parse_schedule(
        data, name, default_max_tries=sp.settings.max_tries, default_timeout=sp.settings.default_timeout_seconds
    )


def _write(sp: Handle, name: str, fields: Mapping[str, Any], *, replace: bool) -> None:
    """tmp/ (fsync'd), rename into schedules/, fsync schedules/."""
    staged = stage(sp, dump_yaml(dict(fields)), sync=True)
    folder = sp.layout.fd(SCHEDULES)
    try:
        if replace:
            fs.rename_replace(sp.layout.fd("tmp"), staged, folder, schedule_file_name(name))
        else:
            fs.rename_noreplace(sp.layout.fd("tmp"), staged, folder, schedule_file_name(name))
    finally:
        unstage(sp, staged)
    fs.fsync_dir(folder)


# -- firing -----------------------------------------------------------------------------------


def fire(sp: Handle, schedule: Schedule, slot: float) -> Submitted:
    """Submit ``schedule``'s job for ``slot``: ``created`` is False when the slot had fired.

    RACE (found by the model, models/slots.pml): a coordinator taking over finishes a firing a
    dead one began, having read the record before; a ``spool purge`` of the slot's job between
    that read and this submit records the slot fired, then removes the job and its key, so the
    key is free again. Under the key's lock, a free key is checked against the record once more:
    recorded, nothing is made (``Withdrawn``)."""

    def recorded() -> bool:
        # This very slot, not "this one or later": after a clock stepped back, slots before the
        # record's are due again and fire (tests/crash/test_schedule_holes.py).
        return read_fired(sp, schedule.name).slot == slot

    return submit(
        sp,
        schedule.spec(slot_key(schedule.name, slot)),
        where=f"schedules/{schedule.name}",
        refuse_when_full=False,
        firing=True,
        unless=recorded,
    )


def run_now(sp: Handle, schedule: Schedule) -> Submitted:
    """``spool schedule run``: the schedule's job once, keyed to now (a person's submit, so a
    full spool refuses it as it refuses ``spool submit``)."""
    moment = sp.clock.wall()
    submitted = submit(
        sp, schedule.spec(slot_key(schedule.name, moment)), where=f"schedules/{schedule.name}", firing=True
    )
    note_run(sp, schedule.name, moment, submitted.id)
    return submitted


def last_fired(sp: Handle, name: str) -> LastFired | None:
    """The last slot ``name`` fired, with its job (schedules/.<name>.fired)."""
    fired = read_fired(sp, name)
    return LastFired(fired.slot, fired.job) if fired.slot is not None else None


def resume_from(schedule: Schedule, through: float, now: float) -> float:
    """``through`` (the last slot handled), unless it is more than a slot ahead of ``now``: the
    wall clock stepped back past it (or the record came from a clock that was ahead). Waiting for
    the clock to reach it again would silence the schedule for as long, so it fires again from
    now; a slot reached a second time finds its job by its key while that job is kept."""
    return through if through <= schedule.next_slot(now) else schedule.last_slot(now)


def lag_seconds(sp: Handle, entry: Entry, now: float) -> float | None:
    """How late the schedule's first slot not yet handled is at ``now`` (0: none is due yet); None
    for a broken or disabled schedule. The coordinator handles a due slot within a pass, so a lag
    that grows means no coordinator fires it (``spool_schedule_lag_seconds``)."""
    schedule = entry.schedule
    if schedule is None or not schedule.enabled:
        return None
    fired = last_fired(sp, entry.name)
    through = resume_from(schedule, max(fired.slot if fired else entry.written, entry.written), now)
    return max(0.0, now - schedule.next_slot(through))


def views(sp: Handle, now: float) -> list[dict[str, Any]]:
    """What ``spool schedule list`` shows of every schedule file, broken ones with their error."""
    return [view(sp, entry, now) for entry in entries(sp).values()]


def view(sp: Handle, entry: Entry, now: float) -> dict[str, Any]:
    schedule, fired = entry.schedule, last_fired(sp, entry.name)
    found: dict[str, Any] = {
        "name": entry.name,
        "expression": None,
        "enabled": None,
        "task": None,
        "catchup": None,
        "overlap": None,
        "next": None,
    }
    if schedule is not None:
        after = max(now, resume_from(schedule, max(fired.slot if fired else now, entry.written), now))
        found.update(
            expression=schedule.expression,
            enabled=schedule.enabled,
            task=schedule.template["task"],
            catchup=schedule.catchup,
            overlap=schedule.overlap,
            next=format_time(schedule.next_slot(after)) if schedule.enabled else None,
        )
    found["last_slot"] = format_time(fired.slot) if fired else None
    found["last_job"] = fired.job_id if fired else None
    state = state_of(sp, fired.job_id) if fired and fired.job_id else None
    found["last_state"] = state.value if state else ("purged" if fired and fired.job_id else None)
    found["error"] = entry.error
    return found


def entry_of(sp: Handle, name: str) -> Entry:
    """The one schedule file ``name``, read (NotFound when there is none)."""
    found = entries(sp).get(name)
    if found is None:
        raise NotFound(f"no schedule {name!r} (schedules/{schedule_file_name(name)})")
    return found


def schedule_fields(
    *,
    cron: str | None,
    tz: str | None,
    every: str | None,
    task: str,
    args: Mapping[str, Any],
    priority: int | None,
    max_tries: int | None,
    timeout: float | None,
    queue: str | None = None,
) -> dict[str, Any]:
    """The file ``spool schedule add`` writes, from its flags (unset ones left out)."""
    fields: dict[str, Any] = {
        "cron": cron,
        "tz": tz,
        "every": every,
        "task": task,
        "args": dict(args),
        "priority": priority,
        "max_tries": max_tries,
        "timeout": timeout,
        "queue": queue,
    }
    return {name: value for name, value in fields.items() if value is not None}


__all__ = [
    "Entry",
    "LastFired",
    "add",
    "entries",
    "entry_of",
    "fire",
    "ignored",
    "last_fired",
    "read_schedule",
    "remove",
    "resume_from",
    "run_now",
    "schedule_fields",
    "schedule_of_fields",
    "set_enabled",
    "view",
    "views",
]
