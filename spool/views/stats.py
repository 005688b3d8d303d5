"""``spool stats``: counts per state, throughput, oldest ready age, coordinator and workers seen.

The numbers come from the ledger. Without a usable one (being rebuilt, unreadable, a read-only
spool that has none) ``collect`` answers a reduced form from the files alone: counts per
folder and which processes hold their locks, with ``ledger`` saying why the rest is missing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from spool.base.errors import LedgerError
from spool.disk.fsio import fs
from spool.disk.layout import ADVANCEMENT, State, coordinator_lock_name, worker_of_lock_name
from spool.disk.locks import is_held
from spool.base.timetext import format_time, parse_time
from spool.views.queueview import queue_views
from spool.workers import SeenWorker, live_workers, roster, unhandled_ready

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
    workers = [_shown(worker) for worker in roster(sp)]
    return {
        "counts": sp.ledger.counts(),
        "ready": sp.ledger.ready_pending_count(),
        "oldest_ready_seconds": round(now - parse_time(oldest, "submitted_at").timestamp(), 3) if oldest else None,
        "completed_last_minute": sp.ledger.completed_since(now - 60),
        "coordinator": coordinator_state(sp),
        "workers": [w for w in workers if w["alive"]] + [w for w in workers if not w["alive"]][:10],
        "unhandled_tasks": unhandled_ready(sp, live),  # task -> ready jobs that no live worker handles
        "queues": queue_views(sp),  # per queue: counts, limits, what holds it (spool.views.queueview)
        "ledger": "ok",
    }


def _shown(worker: SeenWorker) -> dict[str, Any]:
    """A roster row as ``spool stats --json`` prints it (a remote worker's pid is 0)."""
    return {
        "name": worker.name,
        "pid": 0 if worker.remote else worker.pid,
        "host": worker.host,
        "started": format_time(worker.started) if worker.started is not None else None,
        "seen": format_time(worker.seen) if worker.seen is not None else None,
        "alive": worker.alive,
        "remote": worker.remote,
        "tasks": None if worker.tasks is None else sorted(worker.tasks),
    }


def _from_files(sp: Handle, why: str) -> dict[str, Any]:
    from spool.moves.recovery import list_folders  # start-up: recovery (ingest, moves) only when the ledger failed

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
        "queues": None,
        "ledger": why,
    }


def ids_from_files(sp: Handle, state: str | None = None) -> list[str]:
    """Job ids as the folders list them, newest first (ids are time-sortable ULIDs): ``spool ls``
    without a ledger."""
    from spool.moves.recovery import list_folders  # start-up: recovery (ingest, moves) only when the ledger failed

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
