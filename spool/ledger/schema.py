"""The ledger's tables: the schema ``spool.ledger`` reads and writes, and its migration.

Tables (schema version 6, in ``PRAGMA user_version``):
    jobs(id, key, task, state, priority, ready, ready_seq, attempt, tries, max_tries,
         reason, submitted_at, updated, queue, reserved)    one row per job file; state = the
                                           folder; reserved = the last reservation's token
    deps(job_id, dep_id)                   depends_on of every job, for promotion and skips
    history(seq, job_id, at, event, attempt, worker, detail)   one row per transition
    meta(name, value)                      ready_seq counter, coordinator's lease term and
                                           last pass, drops seen by the coordinator
    workers(name, pid, host, started, seen)  local workers seen, for ``spool stats``
    remote_workers(name, host, started, seen, tasks)   remote workers a server heard from, with
                                           the tasks they asked for (space-separated; NULL: not yet)
    queue_limits(name, concurrency, rate_count, rate_ms, paused, error, seen)   the limits of
                                           queues/<name>.yaml in force (the last valid ones) and
                                           the file's error if it is broken now (``spool.queues``)
    claims(queue, at_ms, job_id)           claims of rate-limited queues in the last hour: the
                                           sliding window (``spool.ledger.limits``)
    meta 'ready_pending'                   how many rows are ready in pending/ (backpressure's
                                           count), kept by three triggers on ``jobs``
``jobs.key`` is a plain index, not UNIQUE: keys/ and the files decide what a key means, and an
index must never refuse a row the files hold (version 1 had UNIQUE: a submit racing a purge of
the same key was refused after its job was written). A remote worker has no process here and
no liveness lock, so its own table says who is alive: one heard from within the lease term (version 2
kept it in ``workers`` with pid 0; the migration moves such rows). Its own table, not a column of
``workers``: a process of an older version still inserts 5-value rows there. An older ledger is
migrated on open. Version 4 adds the queue column (every older row is in queue ``default``) and
the two limit tables; version 5 the reserved column (``spool.ledger.limits.reserve``: a claimer's
check that the reconcile did not take its reservation back); version 6 the ``ready_pending`` count:
every submit asks it (backpressure), and counting the claim order's entries cost a submit ~0.25 ms
at 9,000 ready jobs. Triggers keep it in the writer's own transaction, whatever writes the row (an
older spool's process too), so it is never more wrong than the rows; the migration counts once.
"""

from __future__ import annotations

import sqlite3

__all__ = ["SCHEMA", "SCHEMA_VERSION", "TRIGGERS", "migrate"]

SCHEMA_VERSION = 6

SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs(
    id TEXT PRIMARY KEY, key TEXT NOT NULL, task TEXT NOT NULL, state TEXT NOT NULL,
    priority INTEGER NOT NULL, ready INTEGER NOT NULL DEFAULT 0, ready_seq INTEGER,
    attempt INTEGER NOT NULL, tries INTEGER NOT NULL, max_tries INTEGER NOT NULL, reason TEXT,
    submitted_at TEXT NOT NULL, updated REAL NOT NULL, queue TEXT NOT NULL DEFAULT 'default', reserved TEXT);
CREATE INDEX IF NOT EXISTS claim_order ON jobs(priority DESC, ready_seq) WHERE state = 'pending' AND ready = 1;
CREATE INDEX IF NOT EXISTS claim_by_queue ON jobs(queue, priority DESC, ready_seq)
    WHERE state = 'pending' AND ready = 1;
CREATE INDEX IF NOT EXISTS leased_by_queue ON jobs(queue) WHERE state = 'leased';
CREATE INDEX IF NOT EXISTS by_state ON jobs(state, id);
CREATE INDEX IF NOT EXISTS by_key ON jobs(key);
CREATE TABLE IF NOT EXISTS deps(job_id TEXT NOT NULL, dep_id TEXT NOT NULL, PRIMARY KEY(job_id, dep_id));
CREATE INDEX IF NOT EXISTS deps_by_dep ON deps(dep_id);
CREATE TABLE IF NOT EXISTS history(seq INTEGER PRIMARY KEY, job_id TEXT NOT NULL, at REAL NOT NULL,
    event TEXT NOT NULL, attempt INTEGER, worker TEXT, detail TEXT);
CREATE INDEX IF NOT EXISTS history_by_job ON history(job_id, seq);
CREATE TABLE IF NOT EXISTS meta(name TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS workers(name TEXT PRIMARY KEY, pid INTEGER, host TEXT, started REAL, seen REAL);
CREATE TABLE IF NOT EXISTS remote_workers(name TEXT PRIMARY KEY, host TEXT, started REAL, seen REAL, tasks TEXT);
CREATE TABLE IF NOT EXISTS queue_limits(name TEXT PRIMARY KEY, concurrency INTEGER, rate_count INTEGER,
    rate_ms INTEGER, paused INTEGER NOT NULL DEFAULT 0, error TEXT, seen TEXT);
CREATE TABLE IF NOT EXISTS claims(queue TEXT NOT NULL, at_ms INTEGER NOT NULL, job_id TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS claims_by_queue ON claims(queue, at_ms);
"""

# The ready_pending count (version 6). One statement each: SCHEMA is run split at ';'.
_IS_READY = "{row}.state = 'pending' AND {row}.ready = 1"
TRIGGERS = (
    f"""CREATE TRIGGER IF NOT EXISTS ready_pending_in AFTER INSERT ON jobs WHEN {_IS_READY.format(row="NEW")}
    BEGIN UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE name = 'ready_pending'; END""",
    f"""CREATE TRIGGER IF NOT EXISTS ready_pending_out AFTER DELETE ON jobs WHEN {_IS_READY.format(row="OLD")}
    BEGIN UPDATE meta SET value = CAST(value AS INTEGER) - 1 WHERE name = 'ready_pending'; END""",
    f"""CREATE TRIGGER IF NOT EXISTS ready_pending_moved AFTER UPDATE OF state, ready ON jobs
    WHEN ({_IS_READY.format(row="OLD")}) != ({_IS_READY.format(row="NEW")})
    BEGIN UPDATE meta SET value = CAST(value AS INTEGER) + (CASE WHEN {_IS_READY.format(row="NEW")} THEN 1 ELSE -1 END)
        WHERE name = 'ready_pending'; END""",
)
_COUNT_READY = (
    "INSERT INTO meta(name, value) VALUES('ready_pending', "
    "(SELECT count(*) FROM jobs WHERE state = 'pending' AND ready = 1)) "
    "ON CONFLICT(name) DO UPDATE SET value = excluded.value"
)

# Version 1 -> 2: jobs.key loses UNIQUE. SQLite can't drop a constraint: copy the rows over (and
# every later version's change to ``jobs`` the same way). Every old index goes first: a renamed
# table keeps their names, so CREATE INDEX IF NOT EXISTS would skip making them on the new one.
_MIGRATE_FROM_1 = """
DROP INDEX IF EXISTS claim_order;
DROP INDEX IF EXISTS by_state;
DROP INDEX IF EXISTS by_key;
DROP INDEX IF EXISTS claim_by_queue;
DROP INDEX IF EXISTS leased_by_queue;
DROP TRIGGER IF EXISTS ready_pending_in;
DROP TRIGGER IF EXISTS ready_pending_out;
DROP TRIGGER IF EXISTS ready_pending_moved;
ALTER TABLE jobs RENAME TO jobs_v1;
"""

# Version 2 -> 3: the server's records of remote workers (pid 0 in ``workers``) to their own table.
_MOVE_REMOTE_WORKERS = """
INSERT OR IGNORE INTO remote_workers(name, host, started, seen)
    SELECT name, host, started, seen FROM workers WHERE pid = 0;
DELETE FROM workers WHERE pid = 0;
"""


def _copied_columns(db: sqlite3.Connection) -> str:
    """The columns the old table and the new share: a column a version added takes its default
    in every old row (queue 'default' from version 3: the files named none; reserved NULL)."""
    new = {row[1] for row in db.execute("PRAGMA table_info(jobs)")}
    return ", ".join(row[1] for row in db.execute("PRAGMA table_info(jobs_v1)") if row[1] in new)


def migrate(db: sqlite3.Connection) -> None:
    """Create the schema, or bring an older one to SCHEMA_VERSION, in one transaction."""
    if db.execute("PRAGMA user_version").fetchone()[0] >= SCHEMA_VERSION:
        return
    db.execute("BEGIN IMMEDIATE")
    try:
        if db.execute("PRAGMA user_version").fetchone()[0] < SCHEMA_VERSION:  # RACE: another opener did it
            old = db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'jobs'").fetchone()
            if old:
                for statement in _MIGRATE_FROM_1.split(";"):
                    if statement.strip():
                        db.execute(statement)
            for statement in SCHEMA.split(";"):
                if statement.strip():
                    db.execute(statement)
            if old:
                columns = _copied_columns(db)
                db.execute(f"INSERT INTO jobs({columns}) SELECT {columns} FROM jobs_v1")
                db.execute("DROP TABLE jobs_v1")
            for statement in _MOVE_REMOTE_WORKERS.split(";"):
                if statement.strip():
                    db.execute(statement)
            for statement in TRIGGERS:
                db.execute(statement)
            db.execute(_COUNT_READY)  # from here on the triggers keep it
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise
