"""``spool stats``: counts per state, throughput, oldest ready age, coordinator and workers seen.

The numbers come from the ledger. Without a usable one (being rebuilt, unreadable, a read-only
spool that has none) ``collect`` answers a reduced form from the files alone: counts per
folder and which processes hold their locks, with ``ledger`` saying why the rest is missing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from spool.errors import LedgerError
from spool.fsio import fs
from spool.layout import ADVANCEMENT, State, coordinator_lock_name, worker_lock_name, worker_of_lock_name
from spool.locks import is_held
from spool.timetext import format_time, parse_time
from spool.workers import FORGET_AFTER_SECONDS, LiveWorker, live_workers, remote_term, unhandled_ready

if TYPE_CHECKING:
    from spool.handle import Handle


def coordinator_state(sp: Handle) -> str:
    """'running (pid N)' or 'no coordinator since T': whether the coordinator's lock is held now."""
    alive = is_held(sp.layout.fd("locks"), coordinator_lock_name())
    try:
        seen = sp.ledger.meta("coordinator_seen")
        pid = sp.ledger.meta("coordinator_pid") if alive else None
    except LedgerError:
        seen = pid = None
    if alive:
        return f"running (pid {pid})" if pid else "running"
    return f"no coordinator since {seen}" if seen else "no coordinator has run yet"


def ledger_trouble(sp: Handle, err: LedgerError, then: str = "showing what the files say") -> str:
    """What to tell a person reading without the ledger: it is being rebuilt, or how to fix it;
    ``then`` says what was done instead."""
    if is_held(sp.layout.fd("locks"), coordinator_lock_name()):
        return f"the ledger is being rebuilt by the coordinator ({err}); {then}"
    if sp.read_only:
        return f"the ledger can't be read on this read-only spool ({err}); {then}"
    return f"{err}; {then}"


def collect(sp: Handle) -> dict[str, Any]:
    try:
        return _from_ledger(sp)
    except LedgerError as err:
        return _from_files(sp, ledger_trouble(sp, err))


def _from_ledger(sp: Handle) -> dict[str, Any]:
    now = sp.clock.wall()
    oldest = sp.ledger.oldest_ready_submitted()
    live = live_workers(sp)
    workers = _local_seen(sp, live) + _remote_heard(sp, now)
    return {
        "counts": sp.ledger.counts(),
        "ready": sp.ledger.ready_pending_count(),
        "oldest_ready_seconds": round(now - parse_time(oldest, "submitted_at").timestamp(), 3) if oldest else None,
        "completed_last_minute": sp.ledger.completed_since(now - 60),
        "coordinator": coordinator_state(sp),
        "workers": [w for w in workers if w["alive"]] + [w for w in workers if not w["alive"]][:10],
        "unhandled_tasks": unhandled_ready(sp, live),  # task -> ready jobs that no live worker handles
        "ledger": "ok",
    }


def _local_seen(sp: Handle, live: list[LiveWorker]) -> list[dict[str, Any]]:
    """The local workers the ledger saw; alive while their liveness lock is held."""
    advertised = {w.name: w.tasks for w in live if not w.remote}
    return [
        {
            "name": name,
            "pid": pid,
            "host": host,
            "started": format_time(started),
            "seen": format_time(seen),
            "alive": bool(is_held(sp.layout.fd("locks"), worker_lock_name(name))),
            "remote": False,
            "tasks": _listed(advertised.get(name)),
        }
        for name, pid, host, started, seen in sp.ledger.workers()
    ]


def _remote_heard(sp: Handle, now: float) -> list[dict[str, Any]]:
    """The remote workers a server heard from in the last hour (pid 0: no process here); alive
    while heard from within the lease term (``spool.workers``)."""
    term = remote_term(sp)
    return [
        {
            "name": name,
            "pid": 0,
            "host": host,
            "started": format_time(started),
            "seen": format_time(seen),
            "alive": now - seen <= term,
            "remote": True,
            "tasks": _listed(None if tasks is None else frozenset(tasks)),
        }
        for name, host, started, seen, tasks in sp.ledger.remote_workers(now - FORGET_AFTER_SECONDS)
    ]


def _listed(tasks: frozenset[str] | None) -> list[str] | None:
    return None if tasks is None else sorted(tasks)


def _from_files(sp: Handle, why: str) -> dict[str, Any]:
    from spool.recovery import list_folders  # start-up: recovery (ingest, moves) only when the ledger failed

    counts: dict[str, int] = {}
    for folders in list_folders(sp).jobs.values():
        state = max(folders, key=lambda s: ADVANCEMENT[s]).value
        counts[state] = counts.get(state, 0) + 1
    locks_fd = sp.layout.fd("locks")
    workers = [
        {
            "name": worker_of_lock_name(name),
            "pid": None,
            "host": None,
            "started": None,
            "seen": None,
            "alive": True,
            "remote": False,
            "tasks": None,
        }
        for name in sorted(fs.list_dir(locks_fd))
        if worker_of_lock_name(name) is not None and is_held(locks_fd, name)
    ]
    return {
        "counts": counts,
        "ready": None,
        "oldest_ready_seconds": None,
        "completed_last_minute": None,
        "coordinator": coordinator_state(sp),
        "workers": workers,
        "unhandled_tasks": {},
        "ledger": why,
    }


def ids_from_files(sp: Handle, state: str | None = None) -> list[str]:
    """Job ids as the folders list them, newest first (ids are time-sortable ULIDs): ``spool ls``
    without a ledger."""
    from spool.recovery import list_folders  # start-up: recovery (ingest, moves) only when the ledger failed

    jobs = list_folders(sp).jobs
    wanted = None if state is None else State(state)
    return sorted(
        (
            job_id
            for job_id, folders in jobs.items()
            if wanted is None or max(folders, key=lambda s: ADVANCEMENT[s]) is wanted
        ),
        reverse=True,
    )
