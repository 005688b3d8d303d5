"""``Spool``: a spool folder opened for use, and the Python API for producers and tools.

    from spool import Spool
    sp = Spool("./spool")
    job_id = sp.submit("wordcount", {"path": "book.txt"}, key="book-1")   # durable on return
    sp.submit_many([sp.spec("wordcount", {"path": p}, key=p) for p in paths])  # one fsync a folder

One ``Spool`` holds the layout's directory fds, the settings in force, a ledger connection and
the clock (a ``spool.handle.Handle``, which is what the layers below take). Every command and
process builds one and passes it down; nothing reads the environment later.
"""

from __future__ import annotations

import functools
import os
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from spool.moves import store
from spool.base.clock import SYSTEM, Clock
from spool.base.errors import InvalidJob, LedgerError, NotFound, SpoolError
from spool.disk.fsio import fs
from spool.handle import Handle
from spool.disk.ids import is_valid_id
from spool.job import MAX_SECONDS, JobFile
from spool.disk.layout import Layout, State, job_name, result_name
from spool.progress import read_progress
from spool.disk.rootdir import init_spool, is_group_shared, refuse_unsafe_root
from spool.settings import Settings, load_settings
from spool.moves.submission import Submitted, submit
from spool.base.timetext import format_time

DEFAULT_ROOT = "./spool"


def resolve_root(root: str | os.PathLike[str] | None, environ: Mapping[str, str]) -> Path:
    """--spool DIR, else $SPOOL_DIR, else ./spool."""
    return Path(root or environ.get("SPOOL_DIR") or DEFAULT_ROOT)


class Spool(Handle):
    """An open spool. Raises NotASpool for a folder without the ``.spool`` marker.

    ``clock``: what every decision reads time from (``spool.base.clock.FakeClock`` in tests)."""

    def __init__(
        self,
        root: str | os.PathLike[str] | None = None,
        *,
        environ: Mapping[str, str] | None = None,
        flags: Mapping[str, object | None] | None = None,
        settings: Settings | None = None,
        clock: Clock = SYSTEM,
    ) -> None:
        environ = os.environ if environ is None else environ
        layout = Layout(resolve_root(root, environ))
        refuse_unsafe_root(layout.root)
        if is_group_shared(layout.root):
            fs.file_mode = 0o660
            os.umask(0o007)
        super().__init__(layout, settings or load_settings(layout.config_path, environ, flags or {}), clock=clock)
        self.sync_limits = functools.partial(_sync_limits, weakref.ref(self))

    @classmethod
    def init(cls, root: str | os.PathLike[str], *, group_shared: bool = False, **kwargs: Any) -> Spool:
        init_spool(root, group_shared=group_shared)
        return cls(root, **kwargs)

    # -- producing ---------------------------------------------------------------------------

    def submit(
        self,
        task: str,
        args: Mapping[str, Any] | None = None,
        *,
        key: str | None = None,
        priority: int | None = None,
        max_tries: int | None = None,
        timeout: float | None = None,
        delay_seconds: float | None = None,
        depends_on: Sequence[str] = (),
        queue: str | None = None,
    ) -> str:
        """Submit one job; returns its id (the existing job's id if ``key`` was seen before).

        Durable on return: the job file and its key reservation are fsync'd. Raises TryLater
        when the spool is full, InvalidJob for a bad spec, NotFound for an unknown dependency.
        """
        spec = self.spec(
            task,
            args,
            key=key,
            priority=priority,
            max_tries=max_tries,
            timeout=timeout,
            delay_seconds=delay_seconds,
            depends_on=depends_on,
            queue=queue,
        )
        return self.submit_spec(spec).id

    def submit_spec(self, spec: Mapping[str, Any], *, where: str = "submit") -> Submitted:
        return submit(self, spec, where=where)

    def submit_many(self, specs: Iterable[Mapping[str, Any]]) -> list[Submitted]:
        """Submit many jobs; one ``Submitted`` (id, created) per spec, in input order.

        Each spec is a mapping of job fields, as ``spec(...)`` makes from ``submit``'s keywords.
        Durable on return, with one fsync of each folder for the batch (per round of keys: see
        ``spool.moves.batch``). A key seen before, or repeated in the batch, answers with its one job
        (``created=False``). Every spec is checked first: a bad one refuses the whole batch
        with InvalidJob ``job <index>: ...`` (NotFound for an unknown dependency), and TryLater
        when the batch would take the spool past ``max_pending``; nothing is written then.
        """
        from spool.moves.batch import submit_many  # start-up: a one-job submit never loads the batch path

        return submit_many(self, specs)

    def spec(
        self,
        task: str,
        args: Mapping[str, Any] | None = None,
        *,
        key: str | None = None,
        priority: int | None = None,
        max_tries: int | None = None,
        timeout: float | None = None,
        delay_seconds: float | None = None,
        depends_on: Sequence[str] = (),
        queue: str | None = None,
    ) -> dict[str, Any]:
        """The spec ``submit`` makes from these keywords, for ``submit_many`` (a delay counted on
        this spool's clock from now). Raises InvalidJob for what ``build_spec`` checks."""
        return build_spec(
            task,
            args,
            key=key,
            priority=priority,
            max_tries=max_tries,
            timeout=timeout,
            delay_seconds=delay_seconds,
            depends_on=depends_on,
            clock=self.clock,
            queue=queue,
        )

    # -- inspecting --------------------------------------------------------------------------

    def job(self, job_id: str) -> tuple[State, JobFile]:
        """The job's state (a result it earned makes it done) and its file, looked for again if it moved."""
        _check_id(job_id)
        located = store.read_job_now(self, job_id, looks=20)
        if located is None:
            if store.has_result(self, job_id):
                raise SpoolError(f"{job_id}: a result without a job file (a purge in progress?)")
            raise NotFound(f"no job {job_id}")
        state, job_file = located
        earned = store.has_result(self, job_id) and store.result_is_earned(state, job_file)
        return (State.DONE if earned else state), job_file

    def status(self, job_id: str) -> dict[str, Any]:
        state, job_file = self.job(job_id)
        return status_view(self, state, job_file)

    def result(self, job_id: str) -> Any:
        """The job's result value. NotFound before there is one; SpoolError for a dead job."""
        _check_id(job_id)
        try:
            data = fs.read_file(self.layout.fd("results"), result_name(job_id), self.settings.max_result_bytes + 1024)
        except FileNotFoundError:
            state, job_file = self.job(job_id)
            if state is State.DEAD:
                raise SpoolError(f"{job_id}: dead ({job_file.reason}); it has no result") from None
            raise NotFound(f"{job_id}: no result yet ({state.value})") from None
        if not fs.exists(self.layout.fd(State.DONE), job_name(job_id)):
            self._check_earned(job_id)
        import json  # start-up: a submit never reads a result

        return json.loads(data)

    def _check_earned(self, job_id: str) -> None:
        """A result beside a job not in done/ is its result only if an attempt of it linked it
        (``store.result_is_earned``): a planted one is no result (NotFound, SpoolError if dead)."""
        folders = store.folders_of(self, job_id)
        if not folders:
            return  # a purge in progress (its job file goes first): the result is still the job's
        state, job_file = self.job(job_id)
        if state is State.DEAD:
            raise SpoolError(f"{job_id}: dead ({job_file.reason}); it has no result")
        if state is not State.DONE:
            raise NotFound(f"{job_id}: no result yet ({state.value})")

    def state(self, job_id: str) -> State | None:
        _check_id(job_id)  # `spool wait ../done/X` must not look outside the state folders
        return store.state_of(self, job_id)

    def wait(
        self,
        job_ids: Iterable[str],
        timeout_seconds: float | None = None,
        poll_seconds: float = 0.05,
        *,
        on_poll: Callable[[Mapping[str, State]], None] | None = None,
    ) -> dict[str, State]:
        """Block until every job is done or dead (or the timeout runs out); returns their states.

        ``on_poll`` hears the states after every poll, before the check whether to stop (``spool
        wait`` prints progress from it). Sleeps and measures on the spool's clock."""
        ids = list(job_ids)
        for job_id in ids:
            _check_id(job_id)
        deadline = None if timeout_seconds is None else self.clock.monotonic() + timeout_seconds
        while True:
            polled = {job_id: self.state(job_id) for job_id in ids}
            states: dict[str, State] = {}
            for job_id, state in polled.items():
                if state is None:
                    raise NotFound(f"no job {job_id}")
                states[job_id] = state
            if on_poll is not None:
                on_poll(states)
            if all(state.terminal for state in states.values()) or (
                deadline is not None and self.clock.monotonic() >= deadline
            ):
                return states
            self.clock.sleep(poll_seconds)

    # -- managing ----------------------------------------------------------------------------

    def cancel(
        self, job_id: str, *, timeout_seconds: float | None = None, on_wait: Callable[[str], None] | None = None
    ) -> str:
        _check_id(job_id)
        from spool import admin  # start-up: recovery, ingest and moves are not a producer's

        return admin.cancel(self, job_id, timeout_seconds=timeout_seconds, on_wait=on_wait)

    def requeue(
        self, job_id: str, *, timeout_seconds: float | None = None, on_wait: Callable[[str], None] | None = None
    ) -> State:
        _check_id(job_id)
        from spool import admin  # start-up: recovery, ingest and moves are not a producer's

        return admin.requeue(self, job_id, timeout_seconds=timeout_seconds, on_wait=on_wait)

    # -- for tools that must answer without the ledger ----------------------------------------

    def ids(
        self,
        state: str | None = None,
        *,
        reason: str | None = None,
        limit: int | None = None,
        on_trouble: Callable[[str], None] | None = None,
        task: str | None = None,
        key_prefix: str | None = None,
        queue: str | None = None,
    ) -> list[str]:
        """Job ids, newest first: from the ledger, filtered by ``state``, ``reason``, ``task``, a key's
        ``key_prefix``, ``queue`` and ``limit``.

        When the ledger can't answer, ``on_trouble`` gets one line saying why and what is done
        instead, and the ids come from the folders: those in ``state`` (every job without it),
        with none of the other filters applied, so the caller filters what it reads.
        """
        try:
            return self.ledger.ids(
                state=state, reason=reason, limit=limit, task=task, key_prefix=key_prefix, queue=queue
            )
        except LedgerError as err:
            from spool.views import stats  # start-up: the folder-listing fallback is not a producer's

            if on_trouble is not None:
                on_trouble(stats.ledger_trouble(self, err))
            return stats.ids_from_files(self, state)

    def ledger_trouble(self) -> str | None:
        """One line saying why the ledger can't be used now (views then come from the files),
        or None when it can."""
        try:
            self.ledger.meta("coordinator_seen")
        except LedgerError as err:
            from spool.views import stats  # start-up: the folder-listing fallback is not a producer's

            return stats.ledger_trouble(self, err)
        return None


def build_spec(
    task: str,
    args: Mapping[str, Any] | None = None,
    *,
    key: str | None = None,
    priority: int | None = None,
    max_tries: int | None = None,
    timeout: float | None = None,
    delay_seconds: float | None = None,
    depends_on: Sequence[str] = (),
    clock: Clock = SYSTEM,
    queue: str | None = None,
) -> dict[str, Any]:
    """A job spec from keyword arguments (the CLI and the Python API share it).

    Checks only what would be mangled on the way into a spec (``args`` copied into a dict,
    ``depends_on`` iterated, a delay turned into a time on ``clock``); the schema (job.py)
    checks the rest. Raises InvalidJob.
    """
    if args is not None and not isinstance(args, Mapping):
        raise InvalidJob(f"args must be a mapping of names to values, got {type(args).__name__}")
    if depends_on is not None and (isinstance(depends_on, (str, bytes)) or not isinstance(depends_on, Iterable)):
        raise InvalidJob(f"depends_on must be a list of ids, got {type(depends_on).__name__} {depends_on!r:.60}")
    spec: dict[str, Any] = {"task": task, "args": dict(args or {})}
    if key is not None:
        spec["key"] = key
    if priority is not None:
        spec["priority"] = priority
    if max_tries is not None:
        spec["max_tries"] = max_tries
    if timeout is not None:
        spec["timeout"] = timeout
    if delay_seconds is not None:
        _check_delay(delay_seconds)
    if delay_seconds:
        spec["not_before"] = format_time(clock.wall() + delay_seconds)
    if depends_on:
        spec["depends_on"] = list(depends_on)
    if queue is not None:
        spec["queue"] = queue
    return spec


def _check_delay(delay_seconds: object) -> None:
    if (
        isinstance(delay_seconds, bool)
        or not isinstance(delay_seconds, (int, float))
        or not (0 <= delay_seconds <= MAX_SECONDS)
    ):
        raise InvalidJob(
            f"delay_seconds: expected seconds from 0 to 100 years ({MAX_SECONDS:.0f}), got {delay_seconds!r:.60}"
        )


def status_view(sp: Handle, state: State, job_file: JobFile) -> dict[str, Any]:
    """The one object ``spool status --json`` prints (README: The command line), with the chain
    fields of ``spool.views.chainview``."""
    lease = job_file.lease if state is State.LEASED else None
    view = {
        "id": job_file.id,
        "key": job_file.job.key,
        "task": job_file.job.task,
        "queue": job_file.job.queue,
        "state": state.value,
        "reason": job_file.reason,
        "attempt": job_file.attempt,
        "tries": job_file.tries,
        "max_tries": job_file.job.max_tries,
        "attempts": [record.to_mapping() for record in job_file.attempts],
        "lease": lease.to_mapping() if lease else None,
        "progress": _progress_of(sp, job_file) if lease else None,
        "error": job_file.error,
        "result": str(sp.layout.path("results", result_name(job_file.id))) if state is State.DONE else None,
        "priority": job_file.job.priority,
        "submitted_at": job_file.submitted_at,
        "depends_on": list(job_file.job.depends_on),
        "skipped_because": job_file.skipped_because,
        "not_before": job_file.job.not_before,
        "dropped_as": job_file.dropped_as,
        "attempts_dropped": job_file.attempts_dropped,
    }
    from spool.views.chainview import chain_view  # start-up: schedules, zoneinfo and datetime load only for a view
    from spool.views.queueview import held_by  # start-up: the limits' views load only for a view

    view["held_by"] = held_by(sp, state, job_file.job.queue, job_file.job.not_before)  # the limit holding it
    return {**view, **chain_view(sp, view)}  # parents, waiting_for, children, schedule


def _progress_of(sp: Handle, job_file: JobFile) -> dict[str, object] | None:
    """The running handler's newest ``spool.progress`` ({fraction, message}), or None."""
    value = read_progress(sp, job_file.id, job_file.attempt)
    return value.to_mapping() if value is not None else None


def _check_id(job_id: str) -> None:
    if not is_valid_id(job_id):
        raise InvalidJob(f"{job_id!r} is not a job id")


def _sync_limits(spool: weakref.ref[Spool]) -> None:
    """queues/ into the spool's ledger: a new one takes no claim before (``spool.ledger.reservations``)."""
    if (sp := spool()) is not None:
        from spool import queues  # start-up: a submit never reads queues/ (only a claim does)

        queues.sync(sp)
