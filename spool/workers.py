"""Which live workers handle which tasks: local ones from their liveness locks, remote ones from
when a server last heard from them.

Every local worker holds ``locks/worker-<name>.lock`` while it lives (``spool.disk.locks``) and writes
into it, through the held fd, one JSON object: ``{"name", "pid", "host", "tasks": [...]}``, with
``shell`` among the tasks only under ``--allow-shell``. A lock file whose lock is free is a dead
worker's and is ignored. A live worker whose file holds no readable advertisement (it is starting,
or an older version) handles tasks nobody knows: while one runs, nothing is reported unhandled.

A remote worker (``spool worker --server``) has no process and no lock here; it must get none, as
the coordinator expires a lease at once when its holder's lock is free. The server records in the
ledger's ``remote_workers`` table when it last heard from each (a lease request, a heartbeat, an
outcome) and the tasks it asked for; one heard from within the lease term is alive. The record is
refreshed well within the term (``runner.api.leases``), and the seen time is the server's wall
clock, compared with the reader's. This says who is alive only: a remote lease still expires on
the coordinator's counter alone. The ledger's ``workers`` table says which local workers were seen.
"""

from __future__ import annotations

import json
import os
import re
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from spool.base.errors import InvalidJob, LedgerError, UsageError
from spool.disk.fsio import fs
from spool.disk.layout import worker_lock_name, worker_of_lock_name
from spool.disk.locks import is_held

if TYPE_CHECKING:
    from spool.handle import Handle

WORKER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_ADVERT_MAX_BYTES = 64 * 1024
FORGET_AFTER_SECONDS = 3600.0  # a worker neither alive nor heard from this long is left out of listings


def check_worker_name(name: str) -> str:
    """A worker's name becomes part of a file name in locks/: refuse anything but the id grammar."""
    if not WORKER_NAME.fullmatch(name):
        raise UsageError(
            f"--name {name!r}: a worker name is 1-64 letters, digits, '_', '-' or '.', starting with a letter or digit"
        )
    return name


def advertisement(name: str, tasks: Iterable[str]) -> bytes:
    """What a worker writes into its own liveness lock."""
    return (
        json.dumps({"name": name, "pid": os.getpid(), "host": socket.gethostname(), "tasks": sorted(tasks)}).encode()
        + b"\n"
    )


@dataclass(frozen=True)
class LiveWorker:
    name: str
    pid: int | None
    host: str | None
    tasks: frozenset[str] | None  # None: not advertised (yet)
    remote: bool = False


# Stands for the remote workers when the ledger can't say which live: one of unknown tasks, so
# no task is called unhandled on a guess.
UNKNOWN_REMOTE = LiveWorker("", None, None, None, remote=True)


def live_workers(sp: Handle) -> list[LiveWorker]:
    """Every worker alive right now, with what it advertises: the local ones (their liveness
    locks), then the remote ones (heard from within the lease term)."""
    try:
        remote = live_remote_workers(sp)
    except LedgerError:  # being rebuilt, or unreadable on a read-only spool
        remote = [UNKNOWN_REMOTE]
    return local_workers(sp) + remote


def local_workers(sp: Handle) -> list[LiveWorker]:
    """Every worker whose liveness lock is held right now, with what it advertises."""
    locks_fd = sp.layout.fd("locks")
    found = []
    for entry in sorted(fs.list_dir(locks_fd)):
        name = worker_of_lock_name(entry)
        if name is None:
            continue
        if is_held(locks_fd, entry) is not True:  # free, or not a lock at all (a planted directory)
            continue
        found.append(advertised(locks_fd, name))
    return found


def advertised(locks_fd: int, name: str) -> LiveWorker:
    """What local worker ``name`` writes into its lock file; tasks None when it holds no readable
    advertisement (a planted non-file, one being rewritten, or a worker still starting)."""
    try:
        advert = json.loads(fs.read_file(locks_fd, worker_lock_name(name), _ADVERT_MAX_BYTES) or b"null")
    except (OSError, InvalidJob, ValueError):
        advert = None
    if not isinstance(advert, dict) or not isinstance(advert.get("tasks"), list):
        return LiveWorker(name, None, None, None)
    pid = advert.get("pid")
    return LiveWorker(
        name,
        pid if isinstance(pid, int) else None,
        str(advert.get("host") or "") or None,
        frozenset(str(task) for task in advert["tasks"]),
    )


def published_term(sp: Handle) -> float:
    """The lease term the coordinator publishes in the ledger (it alone decides expiry), else this
    spool's own setting, also when the ledger can't be read (being rebuilt, on a read-only
    spool): a worker beats three times in it and a remote worker stays alive unheard for it. The
    one reader of the published term, for workers, the API, stats and the dashboard."""
    try:
        published = sp.ledger.meta("lease_seconds")
    except LedgerError:
        published = None
    return float(published) if published else sp.settings.lease_seconds


def live_remote_workers(sp: Handle) -> list[LiveWorker]:
    """The remote workers a server heard from within the lease term, latest first."""
    since = sp.clock.wall() - published_term(sp)
    return [
        LiveWorker(name, None, host, None if tasks is None else frozenset(tasks), remote=True)
        for name, host, _started, _seen, tasks in sp.ledger.remote_workers(since)
    ]


@dataclass(frozen=True)
class SeenWorker:
    """One row of the roster: a local worker the ledger saw, or a remote one a server heard from."""

    name: str
    remote: bool
    pid: int | None  # None for a remote worker: it has no process here
    host: str | None
    started: float | None
    seen: float | None
    alive: bool  # local: its liveness lock is held now; remote: heard from within the lease term
    tasks: frozenset[str] | None  # what it advertises while alive; None: not advertised, or gone


def roster(sp: Handle) -> list[SeenWorker]:
    """Every worker seen, local ones first (latest seen first), then the remote ones heard from in
    the last ``FORGET_AFTER_SECONDS``: the one list ``spool stats`` and the dashboard show, each
    choosing which rows (raises ``LedgerError``: the ledger is the record of who was seen)."""
    now = sp.clock.wall()
    locks_fd = sp.layout.fd("locks")
    local = []
    for name, pid, host, started, seen in sp.ledger.workers():
        alive = is_held(locks_fd, worker_lock_name(name)) is True
        advertises = advertised(locks_fd, name).tasks if alive else None
        local.append(SeenWorker(name, False, pid, host, started, seen, alive, advertises))
    term = published_term(sp)
    remote = []
    for name, host, started, seen, tasks in sp.ledger.remote_workers(now - FORGET_AFTER_SECONDS):
        told = None if tasks is None else frozenset(tasks)
        remote.append(SeenWorker(name, True, None, host, started, seen, now - seen <= term, told))
    return local + remote


def handlers_of(workers: Iterable[LiveWorker], task: str) -> list[str] | None:
    """Names of the live workers that handle ``task``; None when none is known to but some live
    worker has not said what it handles (so nobody can say the task is unhandled)."""
    workers = list(workers)
    names = [w.name for w in workers if w.tasks is not None and task in w.tasks]
    if not names and any(w.tasks is None for w in workers):
        return None
    return names


def unhandled_ready(sp: Handle, workers: Iterable[LiveWorker] | None = None) -> dict[str, int]:
    """task -> ready jobs in pending/ for each task that no live worker handles."""
    workers = live_workers(sp) if workers is None else list(workers)
    ready = sp.ledger.ready_by_task()
    return {task: ready[task] for task in sorted(ready) if handlers_of(workers, task) == []}


def unhandled_warning(task: str) -> str:
    """The one sentence every reader uses, so `status`, `stats`, `wait` and the log agree."""
    hint = (
        "a worker started with --allow-shell" if task == "shell" else "a worker that imports the module registering it"
    )
    return f"no live worker handles task {task!r}; it waits until {hint} runs"
