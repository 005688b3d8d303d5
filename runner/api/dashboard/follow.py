"""What one browser's event stream follows besides the counts: a job list's rows, or one job.

The sampler (``live``) reads, once a second for every browser together, the ledger rows of the jobs
whose history grew since its last read (at most ``ROWS_PER_SAMPLE``; past it the sample says
``cut``), and the progress of the jobs open browsers watch. Each stream then picks from that sample
in memory, never from the ledger: a list's stream the changed rows its filter matches (and the ids
of the changed ones it no longer matches, so the page drops them), a job page's stream that job's
row and progress. The args part of a list's search can't be matched in memory: a searched list
follows the jobs whose id or key match.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from spool.base.errors import InvalidJob
from spool.disk import is_valid_id
from spool.schedule import key_prefix
from spool.views import Filter

from .story import filter_of

ROWS_PER_SAMPLE = 200
WATCHED_MAX = 64  # jobs whose progress the sampler reads (one listing of leased/ for them all)
# A row's fields a page draws (the ledger's own names).
ROW_FIELDS = ("id", "key", "task", "state", "reason", "attempt", "tries", "max_tries", "submitted_at")


@dataclass(frozen=True)
class Follow:
    """One stream's interest: a list's filter, or one job's id; ``since`` is the sample the page
    was drawn after (its rows changed later are sent first)."""

    filter: Filter | None = None
    job: str | None = None
    since: int | None = None

    def wants(self, row: Mapping[str, Any]) -> bool:
        if self.job is not None:
            return bool(row["id"] == self.job)
        f = self.filter
        if f is None:
            return False
        if any(getattr(f, name) and row[name] != getattr(f, name) for name in ("state", "task", "reason")):
            return False
        if f.schedule and not str(row["key"]).startswith(key_prefix(f.schedule)):
            return False
        search = f.search
        return not search or row["id"].startswith(search.upper()) or search in row["key"]


def follow_of(query: Mapping[str, str]) -> Follow | None:
    """A stream's interest from its query string (``list=1`` and a list's filter, or ``job=ID``;
    ``since=N``); None for the overview's stream, which follows only the numbers."""
    since = query.get("since") or ""
    since_n = int(since) if since.isascii() and since.isdigit() and len(since) <= 18 else None
    if query.get("job"):
        if not is_valid_id(query["job"]):
            raise InvalidJob(f"job: {query['job']!r} is not a job id")
        return Follow(job=query["job"], since=since_n)
    if query.get("list"):
        return Follow(filter=filter_of(query), since=since_n)
    return None


def picked(follow: Follow, rows: Mapping[str, Mapping[str, Any]], cut: bool) -> dict[str, Any]:
    """The part of a message for one stream: the changed rows it wants, the ids it no longer does."""
    wanted = [dict(row) for row in rows.values() if follow.wants(row)]
    gone = [job_id for job_id, row in rows.items() if not follow.wants(row)] if follow.filter else []
    return {"jobs": sorted(wanted, key=lambda r: r["id"], reverse=True), "gone": gone, "cut": cut}


def shown_row(row: Mapping[str, Any], run: Mapping[str, float | None] | None) -> dict[str, Any]:
    """A row as a page draws it, with its last attempt's start and end (``story.runs_of``)."""
    return {**{name: row.get(name) for name in ROW_FIELDS}, "run": dict(run) if run else None}


def merged(samples: Iterable[Any]) -> tuple[dict[str, dict[str, Any]], bool]:
    """The latest row of every job changed in ``samples`` (oldest first), and whether any was cut."""
    rows: dict[str, dict[str, Any]] = {}
    cut = False
    for sample in samples:
        rows.update(sample.jobs)
        cut = cut or sample.jobs_cut
    return rows, cut
