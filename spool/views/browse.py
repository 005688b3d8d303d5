"""The dashboard's read-only questions to the ledger: pages of jobs, counts, holders, firings.

Each is one short read on the ledger's connection (``sp.ledger``), so a page costs the same at
100,000 jobs as at ten: lists are keyset pages over the ``id`` primary key (ids are ULIDs, so
``id DESC`` is newest first) and never a folder listing. They only ask; every move stays with
``spool.admin`` and ``spool.moves.transitions``.

The search matches a job's id (a prefix), its key (anywhere in it) or its args. The ledger holds
no args, so args are matched by reading job files: at most ``ARGS_SCAN_FILES`` of them per page,
newest first among the jobs the other filters match. A page that stopped at that bound says so
(``Page.scan_stopped``) and its cursor continues the search where it stopped.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from spool.base.errors import InvalidJob
from spool.disk.layout import State
from spool.schedule.format import key_prefix
from spool.moves.store import read_job

if TYPE_CHECKING:
    from spool.handle import Handle

__all__ = [
    "ARGS_SCAN_FILES",
    "Filter",
    "Page",
    "busiest_tasks",
    "changed_jobs",
    "chain_edges",
    "count",
    "firings",
    "holders",
    "history_after",
    "history_since",
    "job_rows",
    "last_history_seq",
    "matching_ids",
    "page",
    "ready_pending",
    "reasons",
    "runs",
]

ARGS_SCAN_FILES = 2000
_CHUNK = 200
_COLUMNS = "id, key, task, state, reason, priority, attempt, tries, max_tries, submitted_at, updated"
# The history events a throughput chart counts: a completed attempt, and a failed or expired one.
THROUGHPUT_EVENTS = ("complete", "fail", "expire")


@dataclass(frozen=True)
class Filter:
    """What a job list shows and a bulk action acts on; an empty field filters nothing."""

    state: str | None = None
    task: str | None = None
    reason: str | None = None
    schedule: str | None = None
    search: str | None = None

    def where(self) -> tuple[str, list[Any]]:
        """The SQL condition of every field but ``search``'s args part, with its parameters."""
        sql, params = ["1=1"], list[Any]()
        for column in ("state", "task", "reason"):
            value = getattr(self, column)
            if value:
                sql.append(f"{column} = ?")
                params.append(value)
        if self.schedule:
            low = key_prefix(self.schedule)
            sql.append("key >= ? AND key < ?")
            params += [low, low[:-1] + chr(ord(low[-1]) + 1)]
        return " AND ".join(sql), params


@dataclass
class Page:
    rows: list[dict[str, Any]] = field(default_factory=list)
    next: str | None = None  # the cursor of the next page (an id: the page's rows are all older)
    scan_stopped: bool = False  # the args search read ARGS_SCAN_FILES files and stopped there


def _read(sp: Handle, sql: str, params: Iterable[Any] = ()) -> list[Any]:
    return sp.ledger._read(sql, params)


def _as_rows(found: list[Any]) -> list[dict[str, Any]]:
    names = [name.strip() for name in _COLUMNS.split(",")]
    return [dict(zip(names, row)) for row in found]


def _chunk(sp: Handle, f: Filter, before: str | None, limit: int) -> list[dict[str, Any]]:
    where, params = f.where()
    if before:
        where, params = where + " AND id < ?", params + [before]
    return _as_rows(_read(sp, f"SELECT {_COLUMNS} FROM jobs WHERE {where} ORDER BY id DESC LIMIT ?", [*params, limit]))


def _id_or_key_matches(row: dict[str, Any], search: str) -> bool:
    return row["id"].startswith(search) or row["id"].startswith(search.upper()) or search in row["key"]


def _args_match(sp: Handle, row: dict[str, Any], search: str) -> bool:
    try:
        job_file = read_job(sp, State(row["state"]), row["id"])
    except (FileNotFoundError, InvalidJob, ValueError):
        return False  # moved or purged since the ledger's row was read: it is on another page now
    return search in json.dumps(job_file.job.args, ensure_ascii=False, sort_keys=True)


def page(sp: Handle, f: Filter, *, before: str | None = None, limit: int = 50) -> Page:
    """The ``limit`` newest jobs matching ``f`` older than the cursor ``before``."""
    if not f.search:
        rows = _chunk(sp, f, before, limit + 1)
        return Page(rows[:limit], rows[limit - 1]["id"] if len(rows) > limit else None)
    found, scanned, cursor = Page(), 0, before
    while True:
        chunk = _chunk(sp, f, cursor, _CHUNK)
        for row in chunk:
            cursor = row["id"]
            if _id_or_key_matches(row, f.search):
                found.rows.append(row)
            else:
                scanned += 1
                if _args_match(sp, row, f.search):
                    found.rows.append(row)
            if len(found.rows) == limit or scanned >= ARGS_SCAN_FILES:
                found.scan_stopped = len(found.rows) < limit
                found.next = cursor
                return found
        if len(chunk) < _CHUNK:
            return found


def matching_ids(sp: Handle, f: Filter, *, limit: int) -> Iterator[str]:
    """Every job matching ``f`` (the args search unbounded), newest first, at most ``limit``."""
    cursor, given = None, 0
    while given < limit:
        chunk = _chunk(sp, f, cursor, _CHUNK)
        for row in chunk:
            cursor = row["id"]
            if not f.search or _id_or_key_matches(row, f.search) or _args_match(sp, row, f.search):
                yield row["id"]
                given += 1
                if given >= limit:
                    return
        if len(chunk) < _CHUNK:
            return


def count(sp: Handle, f: Filter) -> int | None:
    """How many jobs match ``f``; None with a search (args are not in the ledger to count)."""
    if f.search:
        return None
    where, params = f.where()
    return int(_read(sp, f"SELECT count(*) FROM jobs WHERE {where}", params)[0][0])


def job_rows(sp: Handle, job_ids: Iterable[str]) -> dict[str, dict[str, Any]]:
    """id -> the ledger's row, for these ids (ids without a row are left out)."""
    ids = list(job_ids)
    found: dict[str, dict[str, Any]] = {}
    for start in range(0, len(ids), 500):
        part = ids[start : start + 500]
        rows = _read(sp, f"SELECT {_COLUMNS} FROM jobs WHERE id IN ({','.join('?' * len(part))})", part)
        found.update((row["id"], row) for row in _as_rows(rows))
    return found


def busiest_tasks(sp: Handle, limit: int) -> tuple[list[str], bool]:
    """The ``limit`` tasks with the most jobs, by name, and whether more tasks have jobs (task
    names are the submitters' choice: a list of them all could be any length)."""
    sql = "SELECT task FROM jobs GROUP BY task ORDER BY count(*) DESC, task LIMIT ?"
    found = [row[0] for row in _read(sp, sql, (limit + 1,))]
    return sorted(found[:limit]), len(found) > limit


def reasons(sp: Handle) -> list[str]:
    return [row[0] for row in _read(sp, "SELECT DISTINCT reason FROM jobs WHERE reason IS NOT NULL ORDER BY reason")]


def holders(sp: Handle) -> dict[str, list[str]]:
    """worker -> the leased jobs it holds (its claim's history row names it), oldest claim first."""
    sql = (
        "SELECT h.worker, j.id FROM jobs j JOIN history h ON h.job_id = j.id AND h.event = 'claim'"
        " AND h.attempt = j.attempt WHERE j.state = 'leased' ORDER BY h.seq"
    )
    held: dict[str, list[str]] = {}
    for worker, job_id in _read(sp, sql):
        held.setdefault(worker or "?", []).append(job_id)
    return held


def firings(sp: Handle, schedule: str, limit: int = 5) -> list[tuple[str, str, str]]:
    """(key, id, state) of a schedule's latest firings, newest slot first."""
    low = key_prefix(schedule)
    sql = "SELECT key, id, state FROM jobs WHERE key >= ? AND key < ? ORDER BY key DESC LIMIT ?"
    return [(k, i, s) for k, i, s in _read(sp, sql, (low, low[:-1] + chr(ord(low[-1]) + 1), limit))]


def last_history_seq(sp: Handle) -> int:
    return int(_read(sp, "SELECT coalesce(max(seq), 0) FROM history")[0][0])


def changed_jobs(sp: Handle, after: int, upto: int, limit: int) -> list[str]:
    """The ids of the jobs with history rows after seq ``after`` up to ``upto``, the latest changed
    first, at most ``limit``."""
    sql = "SELECT job_id FROM history WHERE seq > ? AND seq <= ? GROUP BY job_id ORDER BY max(seq) DESC LIMIT ?"
    return [row[0] for row in _read(sp, sql, (after, upto, limit))]


def history_after(sp: Handle, seq: int) -> list[tuple[int, float, str]]:
    """(seq, at, event) of the throughput events after ``seq``, in order."""
    marks = ",".join("?" * len(THROUGHPUT_EVENTS))
    sql = f"SELECT seq, at, event FROM history WHERE seq > ? AND event IN ({marks}) ORDER BY seq"
    return [(s, a, e) for s, a, e in _read(sp, sql, (seq, *THROUGHPUT_EVENTS))]


def history_since(sp: Handle, since: float) -> list[tuple[int, str, int]]:
    """(second, event, how many) of the throughput events at or after ``since`` (a wall time)."""
    marks = ",".join("?" * len(THROUGHPUT_EVENTS))
    sql = f"SELECT CAST(at AS INTEGER), event, count(*) FROM history WHERE at >= ? AND event IN ({marks}) GROUP BY 1, 2"
    return [(int(s), e, int(n)) for s, e, n in _read(sp, sql, (since, *THROUGHPUT_EVENTS))]


def runs(sp: Handle, job_ids: list[str]) -> list[tuple[str, float | None, float | None]]:
    """(job id, its last claim's time, its last complete, fail or expire's time) from the history,
    for those of ``job_ids`` it has rows of."""
    if not job_ids:
        return []
    sql = (
        "SELECT job_id, max(CASE WHEN event = 'claim' THEN at END),"
        " max(CASE WHEN event IN ('complete', 'fail', 'expire') THEN at END)"
        f" FROM history WHERE job_id IN ({','.join('?' * len(job_ids))}) GROUP BY job_id"
    )
    return [(job_id, started, ended) for job_id, started, ended in _read(sp, sql, job_ids)]


def ready_pending(sp: Handle, job_id: str) -> bool:
    """Whether the job is pending and ready (not waiting for its time or a backoff)."""
    found = _read(sp, "SELECT ready FROM jobs WHERE id = ? AND state = 'pending'", (job_id,))
    return bool(found and found[0][0])


def chain_edges(sp: Handle, job_id: str, limit: int) -> tuple[set[tuple[str, str]], bool]:
    """The (parent, child) links of the chain through ``job_id`` from the ledger's index of
    ``depends_on``: every ancestor (walking up) and every descendant (walking down), one read per
    generation, at most ``limit`` jobs; and whether the walk left some out at that bound."""
    edges: set[tuple[str, str]] = set()
    seen = {job_id}
    cut = False
    for column, other_column in (("job_id", "dep_id"), ("dep_id", "job_id")):  # up, then down
        level = [job_id]
        while level:
            sql = f"SELECT {column}, {other_column} FROM deps WHERE {column} IN ({','.join('?' * len(level))})"
            level_next = []
            for known, other in sorted(_read(sp, sql, level)):
                if other not in seen:
                    if len(seen) >= limit:
                        cut = True
                        continue
                    seen.add(other)
                    level_next.append(other)
                edges.add((other, known) if column == "job_id" else (known, other))
            level = level_next
    return edges, cut
