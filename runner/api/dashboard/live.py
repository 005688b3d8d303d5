"""The dashboard's live numbers: one sampler per server, shared by every open browser.

Once a second a background task (started through ``ApiContext.on_startup``) reads the ledger:
the counts per state and the throughput events (completed, failed or expired attempts) written
since its last read, which it adds into per-second buckets covering the last hour. Every browser's
server-sent-event stream reads the latest sample from memory, so a hundred open dashboards cost
the ledger the same one read a second as none: never a folder scan per refresh per viewer.

A stream first gets the whole hour (only the seconds that had events), then, each second, the
counts and the buckets that changed. A stream that missed samples (a slow client, a reconnect
naming its last event) gets the changes of all it missed from the last ``RESUME_SAMPLES`` samples,
or the whole hour again: no browser ever draws a bucket that changed without it.

The same read brings the rows of the jobs that changed (``follow``): a job list's stream sends the
ones its filter matches, a job page's stream its job's row and progress, so lists and job pages
follow the spool live at no cost to the ledger per browser. An action of the dashboard
(``refresh``) samples at once, so the page it lands on shows counts that include it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import threading
import time
from collections import Counter, deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from spool.views import browse
from spool.base.errors import LedgerError

from .follow import ROWS_PER_SAMPLE, WATCHED_MAX, Follow, merged, picked, shown_row
from .story import progresses_of, runs_of

if TYPE_CHECKING:
    from spool.handle import Handle

log = logging.getLogger("spool.serve.live")

WINDOW_SECONDS = 3600
SAMPLE_SECONDS = 1.0
# A stream ends after this and the browser reconnects (resuming, see ``events``): an open
# dashboard never holds a stopping server for longer.
STREAM_SECONDS = 10.0
RESUME_SAMPLES = 120
_FAILED = ("fail", "expire")


@dataclass
class Sample:
    """What every stream sends: the counts, and the buckets this sample changed."""

    version: int = 0
    now: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    changed: dict[int, tuple[int, int]] = field(default_factory=dict)
    trouble: str | None = None  # why the ledger could not be read (the last numbers are shown)
    jobs: dict[str, dict[str, Any]] = field(default_factory=dict)  # rows of the jobs this sample saw change
    jobs_cut: bool = False  # more changed than ROWS_PER_SAMPLE (or the history was forgotten)
    progress: dict[str, dict[str, Any]] = field(default_factory=dict)  # of the watched jobs running


class Live:
    """The ring of the last hour's per-second (completed, failed) counts, and the latest counts."""

    def __init__(self, sp: Handle, *, wall: Callable[[], float] | None = None) -> None:
        self._sp = sp
        self._wall = wall or sp.clock.wall
        self._buckets: dict[int, list[int]] = {}
        self._seq: int | None = None  # the last history row read; None: read the hour first
        self._generation: int | None = None
        self.sample_now = Sample()
        self._recent: deque[Sample] = deque(maxlen=RESUME_SAMPLES)  # for a browser that reconnects
        self._epoch = secrets.token_hex(4)  # tells this process's event ids from a previous one's
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._job_seq: int | None = None  # the last history row whose job's row was read
        self._watched: Counter[str] = Counter()  # job id -> streams watching its progress
        self._lock = threading.Lock()  # the background task and an action's refresh both sample

    # -- sampling (in a thread: the ledger's reads block) -------------------------------------

    def sample(self) -> Sample:
        """Read the ledger once; returns (and keeps) the new sample."""
        with self._lock:
            return self._sample()

    def refresh(self) -> None:
        """Sample now (in a worker thread): after an action, so the page it lands on is fresh."""
        self.sample()

    def _sample(self) -> Sample:
        now = int(self._wall())
        jobs: dict[str, dict[str, Any]] = {}
        cut = False
        progress: dict[str, dict[str, Any]] = {}
        changed: set[int] = set()
        trouble = None
        counts = self.sample_now.counts
        try:
            generation = self._sp.ledger.generation()
            if generation != self._generation or self._seq is None:
                changed |= self._reload(now)  # a first read, or the ledger was rebuilt or replaced
                self._generation = generation
            else:
                changed |= self._read_new()
            counts = self._sp.ledger.counts()
            jobs, cut = self._read_changed_jobs()
            watched = [job_id for job_id, _ in self._watched.most_common(WATCHED_MAX)]
            progress = progresses_of(self._sp, watched) if watched else {}
        except LedgerError as err:
            trouble = f"the ledger can't be read now ({err}); showing the last numbers"
        self._prune(now)
        previous = self.sample_now
        self.sample_now = Sample(
            version=previous.version + 1,
            now=now,
            counts=counts,
            changed={s: self.bucket(s) for s in changed},
            trouble=trouble,
            jobs=jobs,
            jobs_cut=cut,
            progress=progress,
        )
        self._recent.append(self.sample_now)
        return self.sample_now

    def _reload(self, now: int) -> set[int]:
        seq = browse.last_history_seq(self._sp)
        old = set(self._buckets)
        self._buckets = {}
        for second, event, many in browse.history_since(self._sp, now - WINDOW_SECONDS + 1):
            self._add(second, event, many)
        self._seq = seq
        return old | set(self._buckets)

    def _read_new(self) -> set[int]:
        assert self._seq is not None
        changed = set()
        if browse.last_history_seq(self._sp) < self._seq:
            self._seq = None  # rows were forgotten (a purge, a rebuild): read the hour again
            return self._reload(int(self._wall()))
        for seq, at, event in browse.history_after(self._sp, self._seq):
            self._seq = seq
            self._add(int(at), event)
            changed.add(int(at))
        return changed

    def _read_changed_jobs(self) -> tuple[dict[str, dict[str, Any]], bool]:
        """The rows of the jobs with history rows after the last read (the newest changes first,
        at most ROWS_PER_SAMPLE), and whether some were left out."""
        last = browse.last_history_seq(self._sp)
        if self._job_seq is None or last < self._job_seq:
            cut = self._job_seq is not None  # the history was forgotten: what changed is unknown
            self._job_seq = last
            return {}, cut
        if last == self._job_seq:
            return {}, False
        ids = browse.changed_jobs(self._sp, self._job_seq, last, ROWS_PER_SAMPLE + 1)
        self._job_seq = last
        rows = browse.job_rows(self._sp, ids[:ROWS_PER_SAMPLE])
        runs = runs_of(self._sp, [job_id for job_id in ids[:ROWS_PER_SAMPLE] if job_id in rows])
        shown = {
            job_id: shown_row(rows[job_id], runs.get(job_id)) for job_id in ids[:ROWS_PER_SAMPLE] if job_id in rows
        }
        return shown, len(ids) > ROWS_PER_SAMPLE

    def _add(self, second: int, event: str, many: int = 1) -> None:
        bucket = self._buckets.setdefault(second, [0, 0])
        bucket[1 if event in _FAILED else 0] += many

    def _prune(self, now: int) -> None:
        # A dropped second needs no message: it falls off every chart's left edge by itself.
        for second in [s for s in self._buckets if s <= now - WINDOW_SECONDS]:
            del self._buckets[second]

    def bucket(self, second: int) -> tuple[int, int]:
        completed, failed = self._buckets.get(second, (0, 0))
        return completed, failed

    def whole(self) -> dict[int, tuple[int, int]]:
        return {s: (c, f) for s, (c, f) in sorted(self._buckets.items())}

    # -- the background task ------------------------------------------------------------------

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="dashboard sampler")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None

    async def _run(self) -> None:
        next_at = time.monotonic()
        while True:
            try:
                await asyncio.to_thread(self.sample)
            except Exception:  # a sampler that dies leaves every dashboard frozen: log, go on
                log.exception("dashboard sampler")
            self._changed.set()
            self._changed = asyncio.Event()
            next_at = max(next_at + SAMPLE_SECONDS, time.monotonic())
            await asyncio.sleep(next_at - time.monotonic())

    async def wait_for(self, version: int, timeout: float) -> None:
        """Return once a sample newer than ``version`` exists, or after ``timeout``."""
        if self.sample_now.version > version:
            return
        try:
            await asyncio.wait_for(self._changed.wait(), timeout)
        except TimeoutError:
            pass

    # -- what a stream sends ------------------------------------------------------------------

    async def events(
        self, is_gone: Callable[[], Any], last_event_id: str | None = None, follow: Follow | None = None
    ) -> AsyncIterator[str]:
        """One browser's server-sent events, until it goes or ``STREAM_SECONDS`` pass. A browser
        that reconnects names the last event it got (``Last-Event-ID``): it gets only what changed
        since, when this server still holds those samples, else the whole hour. A stream that
        ``follow``s a list or a job gets its changed rows too (``follow.picked``)."""
        ends = time.monotonic() + STREAM_SECONDS
        yield "retry: 1000\n\n"
        seen = self._resumed_at(last_event_id)  # 0: nothing sent yet (samples start at 1)
        rows_seen = seen or (follow.since if follow and follow.since is not None else None)
        if follow is not None and follow.job is not None:
            self._watched[follow.job] += 1
        try:
            while time.monotonic() < ends:
                await self.wait_for(seen, timeout=5.0)
                if await is_gone():
                    return
                sample = self.sample_now
                if sample.version == seen:
                    yield ": idle\n\n"  # a comment: keeps proxies from closing a quiet stream
                    continue
                changes = self._changes_since(seen)
                message = _message(sample, self.whole() if changes is None else changes, full=changes is None)
                if follow is not None:
                    message.update(self._followed(follow, rows_seen, sample))
                seen = rows_seen = sample.version
                yield f"id: {self._epoch}.{seen}\ndata: " + json.dumps(message, separators=(",", ":")) + "\n\n"
        finally:
            if follow is not None and follow.job is not None:
                self._watched[follow.job] -= 1
                if self._watched[follow.job] <= 0:
                    del self._watched[follow.job]

    def _followed(self, follow: Follow, after: int | None, sample: Sample) -> dict[str, Any]:
        """What a following stream gets: the rows changed by every sample after ``after`` (cut when
        this server no longer holds them all), and its job's progress."""
        held = tuple(self._recent)  # a copy: the sampler appends from another thread
        newer = [s for s in held if after is not None and after < s.version <= sample.version]
        whole = after is not None and (after == sample.version or (newer and newer[0].version == after + 1))
        rows, cut = merged(newer)
        message = picked(follow, rows, cut or (after is not None and not whole))
        if follow.job is not None:
            message["progress"] = sample.progress.get(follow.job)
        return message

    def _resumed_at(self, last_event_id: str | None) -> int:
        epoch, _, version = (last_event_id or "").partition(".")
        whole = version.isascii() and version.isdigit() and len(version) <= 18  # int() of 5,000 digits raises
        if epoch != self._epoch or not whole or int(version) > self.sample_now.version:
            return 0  # none, another server process's, or nonsense: start with the whole hour
        return int(version)

    def _changes_since(self, version: int) -> dict[int, tuple[int, int]] | None:
        """The buckets changed by every sample after ``version``, or None when not all are held."""
        if version == 0:
            return None
        newer = [sample for sample in tuple(self._recent) if sample.version > version]
        if not newer or newer[0].version != version + 1:
            return None
        merged: dict[int, tuple[int, int]] = {}
        for sample in newer:
            merged.update(sample.changed)  # a bucket's value is its whole count: the latest wins
        return merged


def _message(sample: Sample, points: dict[int, tuple[int, int]], *, full: bool) -> dict[str, Any]:
    return {
        "full": full,
        "now": sample.now,
        "window": WINDOW_SECONDS,
        "counts": sample.counts,
        "points": [[s, c, f] for s, (c, f) in sorted(points.items())],
        "trouble": sample.trouble,
    }
