"""The ledger (``Ledger``): an SQLite index over the job files, never the truth.

It answers what folders can't answer cheaply: which ready job to claim next at 100,000 pending
(an index on priority and the order jobs became ready), which key maps to which id, which
waiting jobs depend on a job, counts per state, and each job's history. Everything in it can be
derived from the files; ``spool fsck --repair`` rebuilds it from them, and the coordinator
reconciles it against folder listings at start and on every pass. It runs in WAL mode with
``synchronous=NORMAL``: its commits are not fsync'd (a ledger commit need not survive a power
cut, because the files do; docs/reliability.md lists what is fsync'd).

The tables, their schema version and its migration are ``spool.ledger.schema``'s.

The file is the one at the name: the ledger is opened, and stat'ed before every transaction
(~2 us), through the spool's folder fd, so a ledger deleted or moved aside under running
processes is noticed and opened again (created empty when missing; the coordinator's reconcile
refills it; ``spool.ledger.file`` says how that stays safe). Every ``sqlite3.Error`` leaves a
method as a typed error: ``DiskFull`` (SQLITE_FULL), ``LedgerUnusable`` (not a database), else
``LedgerError``.
"""

from __future__ import annotations

import itertools
import os
import sqlite3
import threading
from collections.abc import Collection, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from spool.ledger import file as lf
from spool.base.clock import SYSTEM, Clock
from spool.base.errors import LedgerError, LedgerUnusable
from spool.job import JobFile
from spool.disk.layout import LEDGER_NAME, Layout, State
from spool.ledger import limits
from spool.ledger.queries import LedgerQueries
from spool.ledger.queue_rows import QueueRows
from spool.ledger.reservations import Reservations
from spool.ledger.schema import migrate
from spool.ledger.turns import Turns

_OPENS = itertools.count(1)  # every open of a ledger file in this process, numbered


class Ledger(LedgerQueries, QueueRows, Reservations):
    """One connection per process; every method is one short transaction.

    ``read_only`` (a spool on a read-only mount): opened with SQLite's ``mode=ro`` (or, when
    that can't map the WAL index, ``immutable=1``), never created, never migrated.
    """

    def __init__(self, layout: Layout, *, read_only: bool = False, clock: Clock = SYSTEM) -> None:
        self.path = layout.ledger_path
        self._layout = layout
        self._read_only = read_only
        self._clock = clock  # what the rows' times (updated, history.at) are read from
        self._mutex = threading.Lock()
        self._turns = Turns(layout)  # the writers' queue in front of SQLite's lock
        self._db: sqlite3.Connection | None = None
        self._ident: tuple[int, int] | None = None
        self._generation = 0  # ``generation``: which open of a file at the name this is
        # When the last reservation that a full rate window held back may find room (wall time),
        # or None: a hint for a claimer that got nothing, so it need not wait out a slow poll.
        self.retry_at: float | None = None
        with self._errors():
            self._connect()

    def close(self) -> None:
        """Close; the last user of the ledger first empties the WAL into the file, as SQLite's own
        close would (which also deletes the -wal by name: turned off, see ``spool.ledger.file``).
        Through our fds only, so safe even if the file was replaced; never waits for others."""
        with self._mutex:
            if self._db is not None and not self._read_only:
                try:
                    self._db.execute("PRAGMA busy_timeout = 0")
                    self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
                except sqlite3.Error:
                    pass
            self._drop()
            self._turns.close()

    # -- the file ----------------------------------------------------------------------------

    def _connect(self) -> None:
        """Open the file now at the name (creating it when missing); retry if it changes meanwhile."""
        for _ in range(10):
            before = lf.identity(self._layout.root_fd)
            if before is None:
                if self._read_only:
                    raise LedgerError(f"{self.path}: there is no ledger (a read-only spool can't make one)")
                lf.create(self._layout)
                continue
            try:
                db = lf.open_db(self._where(), read_only=self._read_only)
            except sqlite3.Error:
                if lf.identity(self._layout.root_fd) != before:
                    continue  # RACE: deleted or moved aside between our stat and SQLite's open
                raise
            if lf.identity(self._layout.root_fd) == before:
                try:
                    if not self._read_only:
                        lf.fix_mode(self._layout.root_fd)
                        lf.prepare(db)
                        migrate(db)
                    self._db, self._ident = db, before
                    self._generation = next(_OPENS)
                    return
                except BaseException:
                    lf.close_quietly(db)
                    raise
            lf.close_quietly(db)  # RACE: fsck or a person replaced the file while we opened it
        raise LedgerError(f"{self.path}: the ledger keeps changing under us; try again")

    def _where(self) -> str:
        # Through the folder fd: it still names the spool after a rename of the spool folder.
        proc = f"/proc/self/fd/{self._layout.root_fd}"
        return f"{proc}/{LEDGER_NAME}" if os.path.isdir(proc) else str(self.path)

    def _current(self) -> sqlite3.Connection:
        """Our connection, reopened first if the name now holds another file (or none). Caller
        holds the mutex."""
        if self._db is not None and lf.identity(self._layout.root_fd) != self._ident:
            self._drop()
        if self._db is None:
            self._connect()
        assert self._db is not None
        return self._db

    def _drop(self) -> None:
        if self._db is not None:
            lf.close_quietly(self._db)
            self._db, self._ident = None, None

    @contextmanager
    def _errors(self) -> Iterator[None]:
        try:
            yield
        except sqlite3.Error as err:
            raise lf.typed(err, self.path, self._layout.root_fd) from err

    # -- transactions ------------------------------------------------------------------------

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """BEGIN IMMEDIATE ... COMMIT, so concurrent writers queue on SQLite's lock, never deadlock;
        in turns (``spool.ledger.turns``), so a waiting writer looks again within 2 ms, not SQLite's 1-25."""
        with self._mutex, self._errors():
            db = self._current()
            taken = self._turns.take()
            try:
                db.execute("BEGIN IMMEDIATE")
                try:
                    yield db
                    db.execute("COMMIT")
                except BaseException:
                    if db.in_transaction:
                        try:
                            db.execute("ROLLBACK")
                        except sqlite3.Error:
                            pass
                    raise
            finally:
                if taken:
                    self._turns.give_back()

    @contextmanager
    def _snapshot(self) -> Iterator[sqlite3.Connection]:
        """BEGIN (deferred) ... COMMIT: several reads that see one moment, blocking no writer."""
        with self._mutex, self._errors():
            db = self._current()
            db.execute("BEGIN")
            try:
                yield db
            finally:
                if db.in_transaction:
                    db.execute("COMMIT")

    def _read(self, sql: str, params: Iterable[Any] = ()) -> list[Any]:
        with self._mutex, self._errors():
            return self._current().execute(sql, tuple(params)).fetchall()

    # -- writes ------------------------------------------------------------------------------

    def record(
        self,
        job_file: JobFile,
        state: State,
        *,
        ready: bool,
        event: str,
        worker: str | None = None,
        detail: str | None = None,
        now: float | None = None,
    ) -> None:
        """Make the job's row match its file after a transition, and log the event. A submit's
        row (``event="submit"``) never replaces one: see ``_upsert``."""
        now = self._clock.wall() if now is None else now
        with self._write() as db:
            _upsert(db, job_file, state, ready, now, first=event == "submit")
            db.execute(
                "INSERT INTO history(job_id, at, event, attempt, worker, detail) VALUES(?,?,?,?,?,?)",
                (job_file.id, now, event, job_file.attempt, worker, detail),
            )

    def record_many(
        self, entries: Iterable[tuple[JobFile, State, bool]], *, event: str, worker: str | None = None
    ) -> None:
        """``record`` for many jobs (file, state, ready) in one transaction, in order (a batch's
        ready jobs take their places in the claim order as the batch listed them)."""
        now = self._clock.wall()
        with self._write() as db:
            for job_file, state, ready in entries:
                _upsert(db, job_file, state, ready, now, first=event == "submit")
                db.execute(
                    "INSERT INTO history(job_id, at, event, attempt, worker, detail) VALUES(?,?,?,?,?,?)",
                    (job_file.id, now, event, job_file.attempt, worker, None),
                )

    def forget(self, job_ids: Iterable[str]) -> None:
        with self._write() as db:
            for job_id in job_ids:
                db.execute("DELETE FROM jobs WHERE id = ?", (job_id,))
                db.execute("DELETE FROM deps WHERE job_id = ?", (job_id,))
                db.execute("DELETE FROM history WHERE job_id = ?", (job_id,))

    def rebuild(self, entries: Iterable[tuple[JobFile, State, bool]]) -> int:
        """Replace every row with ones derived from the files; returns the number of jobs."""
        count = 0
        with self._write() as db:
            for table in ("jobs", "deps", "history", "claims"):
                db.execute(f"DELETE FROM {table}")
            db.execute("DELETE FROM meta WHERE name = 'ready_seq'")
            rated = limits.rated_queues(db)
            for job_file, state, ready in sorted(entries, key=lambda entry: entry[0].id):
                if job_file.job.queue in rated:
                    limits.claims_of(db, job_file, self._clock.wall())
                _upsert(db, job_file, state, ready, self._clock.wall())
                for record in job_file.attempts:
                    db.execute(
                        "INSERT INTO history(job_id, at, event, attempt, worker, detail) VALUES(?,?,?,?,?,?)",
                        (
                            job_file.id,
                            self._clock.wall(),
                            f"attempt:{record.outcome or 'running'}",
                            record.attempt,
                            record.worker,
                            None,
                        ),
                    )
                count += 1
        return count

    def set_meta(self, **values: object) -> None:
        with self._write() as db:
            for name, value in values.items():
                db.execute(
                    "INSERT INTO meta(name, value) VALUES(?, ?) ON CONFLICT(name) DO UPDATE SET value = excluded.value",
                    (name, None if value is None else str(value)),
                )

    def worker_seen(self, name: str, pid: int, host: str, started: float, seen: float) -> None:
        with self._write() as db:
            db.execute(
                "INSERT INTO workers VALUES(?,?,?,?,?) ON CONFLICT(name) DO UPDATE SET seen = excluded.seen",
                (name, pid, host, started, seen),
            )

    def remote_worker_seen(
        self, name: str, host: str, started: float, seen: float, tasks: Collection[str] | None
    ) -> None:
        """A server heard from remote worker ``name``; ``tasks`` None (a heartbeat says none)
        keeps the ones its last lease request asked for. Stored space-separated: no task name
        holds a space (``spool.registry.TASK_NAME``)."""
        listed = None if tasks is None else " ".join(sorted(set(tasks)))
        with self._write() as db:
            db.execute(
                "INSERT INTO remote_workers(name, host, started, seen, tasks) VALUES(?,?,?,?,?) "
                "ON CONFLICT(name) DO UPDATE SET host = excluded.host, started = excluded.started, "
                "seen = excluded.seen, tasks = coalesce(excluded.tasks, remote_workers.tasks)",
                (name, host, started, seen, listed),
            )

    # -- reads -------------------------------------------------------------------------------

    def check(self) -> None:
        """Raise LedgerUnusable unless SQLite's quick_check finds the file whole (fsck --repair)."""
        problems = [row[0] for row in self._read("PRAGMA quick_check")]
        if problems != ["ok"]:
            raise LedgerUnusable(f"the ledger {self.path} is damaged ({problems[0]}); it is rebuilt from the files")

    def meta(self, name: str) -> str | None:
        rows = self._read("SELECT value FROM meta WHERE name = ?", (name,))
        return rows[0][0] if rows else None

    def row(self, job_id: str) -> dict[str, Any] | None:
        with self._mutex, self._errors():
            cursor = self._current().execute("SELECT * FROM jobs WHERE id = ?", (job_id,))
            found = cursor.fetchone()
            return dict(zip([c[0] for c in cursor.description], found)) if found else None

    def generation(self) -> int:
        """A new number (in this process) each time a file is opened at the name: it was replaced."""
        with self._mutex, self._errors():
            self._current()
            return self._generation


def set_aside(layout: Layout, now: float) -> str | None:
    """Move an unusable ledger aside (``ledger.sqlite3.corrupt-<time>``, with its -wal and -shm);
    every process opens a fresh one at its next transaction. Returns the new name."""
    return lf.set_aside(layout, now)


def _next_ready_seq(db: sqlite3.Connection) -> int:
    row = db.execute(
        "INSERT INTO meta(name, value) VALUES('ready_seq', 1) ON CONFLICT(name) "
        "DO UPDATE SET value = CAST(value AS INTEGER) + 1 RETURNING value"
    ).fetchone()
    return int(row[0])


def _upsert(
    db: sqlite3.Connection, job_file: JobFile, state: State, ready: bool, now: float, first: bool = False
) -> None:
    """The row of ``job_file`` in ``state``. ``first``: a submit's row, written after the job's
    file was committed (and after a wait for the ledger), so a row already there was made from
    the file meanwhile (the coordinator's reconcile resyncs a file without a row) and may have
    moved on (claimed, done): it is kept, never set back to the submit's pending."""
    if not ready and not first and _update_unready(db, job_file, state, now):
        return
    job = job_file.job
    old = db.execute("SELECT ready, ready_seq FROM jobs WHERE id = ?", (job.id,)).fetchone()
    if first and old is not None:
        return
    if ready and old and old[0]:
        seq = old[1]  # still ready: keep its place in line
    else:
        seq = _next_ready_seq(db) if ready else (old[1] if old else None)
    db.execute(
        "INSERT INTO jobs(id, key, task, state, priority, ready, ready_seq, attempt, tries, max_tries, reason, "
        "submitted_at, updated, queue) VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?) ON CONFLICT(id) DO UPDATE SET "
        "state = excluded.state, ready = excluded.ready, ready_seq = excluded.ready_seq, attempt = excluded.attempt, "
        "tries = excluded.tries, reason = excluded.reason, updated = excluded.updated",
        (
            job.id,
            job.key,
            job.task,
            state.value,
            job.priority,
            int(ready),
            seq,
            job_file.attempt,
            job_file.tries,
            job.max_tries,
            job_file.reason,
            job_file.submitted_at,
            now,
            job.queue,
        ),
    )
    if old is None:
        for dep in job.depends_on:
            db.execute("INSERT OR IGNORE INTO deps(job_id, dep_id) VALUES(?, ?)", (job.id, dep))


def _update_unready(db: sqlite3.Connection, job_file: JobFile, state: State, now: float) -> bool:
    """``_upsert`` of a row that exists and leaves the claim order (a claim, a completion), in
    one statement instead of a read and a write: it keeps its ``ready_seq`` and its deps, as the
    upsert would. False when there is no row yet (the caller then inserts it, deps and all)."""
    cursor = db.execute(
        "UPDATE jobs SET state = ?, ready = 0, attempt = ?, tries = ?, reason = ?, updated = ? WHERE id = ?",
        (state.value, job_file.attempt, job_file.tries, job_file.reason, now, job_file.id),
    )
    return cursor.rowcount == 1
