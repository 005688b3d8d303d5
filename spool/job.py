"""What a job is: the user's spec (``Job``), the runner's additions (``JobFile``), and their YAML.

``Job`` is the immutable part a user writes. ``JobFile`` is the whole file: the spec plus what
the runner adds (attempt, tries, attempts, lease, reason, error...); the lease and the attempt
records are typed (``spool.base.records``). A job's *state* is never
in the file: it is the folder the file is in. ``decode`` wraps every parse or schema failure
in one ``InvalidJob`` that names the field, the value and what was expected.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from spool.base.errors import InvalidJob
from spool.disk.ids import is_valid_id
from spool.base.records import ATTEMPT_FIELDS, Attempt, Lease
from spool.registry import is_valid_task_name
from spool.base.timetext import format_time, parse_time
from spool.yaml.safe import dump_yaml, load_yaml

SPOOL_FORMAT = 1
MAX_KEY_CHARS = 512
SCHEDULE_KEY_PREFIX = "schedule:"  # keys of schedules' firings: no other submit may take one
MAX_DEPENDENCIES = 1000
MAX_ERROR_BYTES = 4096
MAX_TRIES = 1000
MAX_SECONDS = 100 * 365.25 * 86400.0  # 100 years: the longest timeout (and delay) spool takes
# Bounds on what the runner adds to a file, so a file it wrote always reads back (store.read_job):
# the last attempt records are kept (older ones only counted), and only the newest record keeps
# its whole error; older ones keep their last line.
MAX_ATTEMPT_RECORDS = 100
OLD_ERROR_BYTES = 200
SPEC_FIELDS = tuple("spool_format key task args priority max_tries timeout not_before depends_on queue".split())
DEFAULT_QUEUE = "default"
REASONS = ("failed", "expired", "skipped", "cancelled", "invalid")


@dataclass(frozen=True)
class Job:
    """The user's part of a job: what to run and under which limits. Frozen at submit."""

    id: str
    key: str
    task: str
    args: Mapping[str, Any]
    priority: int = 0
    max_tries: int = 3
    timeout: float = 3600.0
    not_before: str | None = None
    depends_on: tuple[str, ...] = ()
    queue: str = DEFAULT_QUEUE

    @cached_property
    def front_yaml(self) -> bytes:
        """The file's first two runs (format and id, the spec) as YAML: the same bytes at submit,
        claim and done, so a Job (frozen, its ``args`` never changed once made) encodes them once."""
        head, spec = self.front_parts()
        return dump_yaml({**head, **spec})

    def front_parts(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """The file's first two runs as mappings: format and id, then the user's spec."""
        head: dict[str, Any] = {"spool_format": SPOOL_FORMAT, "id": self.id}
        spec: dict[str, Any] = {"key": self.key, "task": self.task, "args": dict(self.args)}
        spec.update(priority=self.priority, max_tries=self.max_tries, timeout=self.timeout)
        if self.not_before is not None:
            spec["not_before"] = self.not_before
        spec["depends_on"] = list(self.depends_on)
        if self.queue != DEFAULT_QUEUE:  # written only when chosen: a default job's file is as before queues
            spec["queue"] = self.queue
        return head, spec

    @property
    def has_own_key(self) -> bool:
        """A key the user chose (reserved in keys/); a defaulted key is the id itself."""
        return self.key != self.id

    @classmethod
    def from_spec(cls, spec: object, *, job_id: str, default_max_tries: int, default_timeout: float, where: str) -> Job:
        """Validate a user's spec (CLI, API, dropped file) into a Job with a fresh id."""
        if not isinstance(spec, Mapping):
            raise InvalidJob(f"{where}: expected a mapping of job fields, got {_kind(spec)}")
        spec = spec_of_runner_file(spec)
        for name in spec:
            if name == "id":
                raise InvalidJob(f"{where}: field 'id': ids are assigned by spool; remove it")
            if name not in SPEC_FIELDS:
                raise InvalidJob(f"{where}: unknown field {str(name)!r}; expected one of {', '.join(SPEC_FIELDS)}")
        return _job_from_fields(
            spec, job_id=job_id, where=where, default_max_tries=default_max_tries, default_timeout=default_timeout
        )


def spec_of_runner_file(fields: Mapping[str, Any]) -> Mapping[str, Any]:
    """The user's part of a whole runner job file dropped as a new job (``cp dead/X.yaml pending/``).

    A copy is a new job with the same spec: the runner's additions (id, attempts, reason...) are
    dropped, and a key that was only the old id's default becomes the new job's own default.
    Anything that is not a runner file (no ``id`` and ``submitted_at``) is returned as it is.
    """
    if not ("id" in fields and "submitted_at" in fields) or not all(
        name in SPEC_FIELDS or name in RUNNER_FIELDS for name in fields
    ):
        return fields
    spec = {name: value for name, value in fields.items() if name in SPEC_FIELDS}
    if spec.get("key") == fields["id"]:
        del spec["key"]
    return spec


def _job_from_fields(
    fields: Mapping[str, Any], *, job_id: str, where: str, default_max_tries: int, default_timeout: float
) -> Job:
    fmt = fields.get("spool_format", SPOOL_FORMAT)
    if fmt != SPOOL_FORMAT or isinstance(fmt, bool):
        raise InvalidJob(f"{where}: field 'spool_format': expected {SPOOL_FORMAT}, got {fmt!r}")
    task = fields.get("task")
    if not isinstance(task, str) or not (task == "shell" or is_valid_task_name(task)):
        raise InvalidJob(f"{where}: field 'task': expected a task name like 'wordcount', got {_show(task)}")
    key = fields.get("key", job_id)
    if not isinstance(key, str) or not key or len(key) > MAX_KEY_CHARS or "\x00" in key:
        raise InvalidJob(
            f"{where}: field 'key': expected a non-empty string of at most {MAX_KEY_CHARS} characters, got {_show(key)}"
        )
    args = fields.get("args", {})
    if args is None:
        args = {}
    if not isinstance(args, Mapping) or not all(isinstance(k, str) for k in args):
        raise InvalidJob(f"{where}: field 'args': expected a mapping of names to values, got {_show(args)}")
    _check_plain(args, f"{where}: field 'args'")
    priority = fields.get("priority", 0)
    if not _is_int(priority) or abs(priority) > 1_000_000_000:
        raise InvalidJob(f"{where}: field 'priority': expected an integer, got {_show(priority)}")
    max_tries = fields.get("max_tries", default_max_tries)
    if not _is_int(max_tries) or not 1 <= max_tries <= MAX_TRIES:
        raise InvalidJob(
            f"{where}: field 'max_tries': expected an integer from 1 to {MAX_TRIES}, got {_show(max_tries)}"
        )
    timeout = fields.get("timeout", default_timeout)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= MAX_SECONDS:
        raise InvalidJob(
            f"{where}: field 'timeout': expected a positive number of seconds up to 100 years, got {_show(timeout)}"
        )
    not_before = fields.get("not_before")
    if not_before is not None:
        not_before = format_time(parse_time(not_before, f"{where}: field 'not_before'"))
    depends_on = fields.get("depends_on") or []
    if not isinstance(depends_on, list) or len(depends_on) > MAX_DEPENDENCIES:
        raise InvalidJob(
            f"{where}: field 'depends_on': expected a list of at most {MAX_DEPENDENCIES} job ids, "
            f"got {_show(depends_on)}"
        )
    for dep in depends_on:
        if not is_valid_id(dep):
            raise InvalidJob(f"{where}: field 'depends_on': {_show(dep)} is not a job id")
    queue = fields.get("queue", DEFAULT_QUEUE)
    if not is_valid_id(queue):
        raise InvalidJob(
            f"{where}: field 'queue': expected a name like 'email' (letters, digits, '_' and '-', "
            f"at most 64), got {_show(queue)}"
        )
    return Job(
        id=job_id,
        key=key,
        task=task,
        args=dict(args),
        priority=priority,
        max_tries=max_tries,
        timeout=float(timeout),
        not_before=not_before,
        depends_on=tuple(dict.fromkeys(depends_on)),
        queue=queue,
    )


@dataclass(frozen=True)
class JobFile:
    """A whole job file: the spec and the runner's additions. Transitions make new ones."""

    job: Job
    submitted_at: str
    dropped_as: str | None = None
    attempt: int = 0  # the fence: 1, 2, 3... over the job's whole life, never reset
    tries: int = 0  # pickups since submit or the last requeue
    lease: Lease | None = None  # while leased; the file holds {worker, attempt, claimed_at}
    backoff_seconds: float | None = None  # a retry waiting out its backoff (coordinator's clock)
    reason: str | None = None
    error: str | None = None
    skipped_because: str | None = None
    original: str | None = None  # an invalid drop's content, as text
    attempts: tuple[Attempt, ...] = field(default=())
    attempts_dropped: int = 0  # older attempt records not kept (MAX_ATTEMPT_RECORDS)

    @property
    def id(self) -> str:
        return self.job.id

    def replace(self, **changes: Any) -> JobFile:
        """``dataclasses.replace`` without its walk over the fields: 2.6 us, not 4.1 (three a job in a worker)."""
        return JobFile(**{**self.__dict__, **changes})

    def end_attempt(self, *, outcome: str, ended: str, error: str | None = None) -> tuple[Attempt, ...]:
        """The attempts list with the current attempt's record closed."""
        records = list(self.attempts)
        if records and records[-1].attempt == self.attempt and records[-1].is_open:
            records[-1] = records[-1].closed(outcome=outcome, ended=ended, error=error)
        return tuple(records)

    def to_mapping(self) -> dict[str, Any]:
        head, spec, runner = self.mapping_parts()
        return {**head, **spec, **runner}

    def mapping_parts(self) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        """The file's fields in three runs, in file order: format and id, the user's spec, the runner's."""
        head, spec = self.job.front_parts()
        return head, spec, self.runner_part()

    def runner_part(self) -> dict[str, Any]:
        """The runner's fields, the file's third run, in file order."""
        out: dict[str, Any] = {"submitted_at": self.submitted_at}
        if self.dropped_as is not None:
            out["dropped_as"] = self.dropped_as
        out["attempt"] = self.attempt
        out["tries"] = self.tries
        out["lease"] = self.lease.to_mapping() if self.lease else None
        for name in ("backoff_seconds", "reason", "error", "skipped_because", "original"):
            value = getattr(self, name)
            if value is not None:
                out[name] = tail(value) if name == "error" else value
        dropped, records = bounded_attempts(self.attempts)
        if self.attempts_dropped + dropped:
            out["attempts_dropped"] = self.attempts_dropped + dropped
        out["attempts"] = records
        return out


def bounded_attempts(records: tuple[Attempt, ...]) -> tuple[int, list[dict[str, Any]]]:
    """(how many are dropped, the records to write): the last MAX_ATTEMPT_RECORDS, only the newest
    with its whole error (a 4 KiB tail), each older one with its error's last line."""
    kept = records[-MAX_ATTEMPT_RECORDS:]
    out = [record.to_mapping() for record in kept]
    for record in out[:-1]:
        if isinstance(record.get("error"), str):
            record["error"] = short_error(record["error"])
    if out and isinstance(out[-1].get("error"), str):
        out[-1]["error"] = tail(out[-1]["error"])
    return len(records) - len(kept), out


def short_error(text: str, limit_bytes: int = OLD_ERROR_BYTES) -> str:
    """An older attempt's error: its last non-empty line (what was raised), at most ``limit_bytes``."""
    lines = [line for line in text.splitlines() if line.strip()]
    line = lines[-1].strip() if lines else ""
    data = line.encode("utf-8", errors="replace")
    if len(data) <= limit_bytes:
        return line
    return data[: limit_bytes - 3].decode("utf-8", errors="ignore") + "..."


RUNNER_FIELDS = tuple(
    "id submitted_at dropped_as original attempt tries lease backoff_seconds reason error skipped_because attempts "
    "attempts_dropped".split()
)
_KNOWN_FIELDS = frozenset(SPEC_FIELDS + RUNNER_FIELDS)  # a set: ~20 names looked up a decode


def encode(job_file: JobFile) -> bytes:
    """The job file's bytes: ``dump_yaml(job_file.to_mapping())``, in two runs (block-style YAML of
    a mapping is its top-level entries one after another), the first one the Job's own
    (``Job.front_yaml``, encoded once)."""
    return job_file.job.front_yaml + dump_yaml(job_file.runner_part())


def encode_measured(job_file: JobFile) -> tuple[bytes, int]:
    """The same bytes as ``encode``, and how many of them are the user's spec (what max_job_bytes
    limits). Block-style YAML of a mapping is its top-level entries one after another, so the
    three runs encoded apart and joined are the file, in one encode."""
    head, spec, runner = job_file.mapping_parts()
    spec_bytes = dump_yaml(spec)
    return dump_yaml(head) + spec_bytes + dump_yaml(runner), len(spec_bytes)


def decode(data: bytes, *, source: str, expected_id: str | None, max_bytes: int) -> JobFile:
    """Parse a runner-written job file; any flaw raises ``InvalidJob`` naming ``source``."""
    fields = load_yaml(data, max_bytes=max_bytes, source=source)
    if not isinstance(fields, Mapping):
        raise InvalidJob(f"{source}: expected a mapping of job fields, got {_kind(fields)}")
    for name in fields:
        if name not in _KNOWN_FIELDS:
            raise InvalidJob(f"{source}: unknown field {str(name)!r}")
    job_id = fields.get("id")
    if not is_valid_id(job_id) or (expected_id is not None and job_id != expected_id):
        raise InvalidJob(f"{source}: field 'id': expected {expected_id or 'a job id'}, got {_show(job_id)}")
    job = _job_from_fields(fields, job_id=job_id, where=source, default_max_tries=3, default_timeout=3600.0)
    submitted_at = fields.get("submitted_at")
    if not isinstance(submitted_at, str):
        raise InvalidJob(f"{source}: field 'submitted_at': expected a time, got {_show(submitted_at)}")
    attempt, tries = fields.get("attempt", 0), fields.get("tries", 0)
    if not _is_int(attempt) or not _is_int(tries) or attempt < 0 or tries < 0:
        raise InvalidJob(f"{source}: fields 'attempt'/'tries': expected counts, got {_show(attempt)}/{_show(tries)}")
    lease = fields.get("lease")
    if lease is not None and not (
        isinstance(lease, Mapping) and _is_int(lease.get("attempt")) and isinstance(lease.get("worker"), str)
    ):
        raise InvalidJob(f"{source}: field 'lease': expected {{worker, attempt, claimed_at}} or null")
    attempts = fields.get("attempts") or []
    if not isinstance(attempts, list) or not all(
        isinstance(r, Mapping) and r.keys() == set(ATTEMPT_FIELDS) for r in attempts
    ):
        raise InvalidJob(f"{source}: field 'attempts': expected a list of records {{{', '.join(ATTEMPT_FIELDS)}}}")
    attempts_dropped = fields.get("attempts_dropped", 0)
    if not _is_int(attempts_dropped) or attempts_dropped < 0:
        raise InvalidJob(f"{source}: field 'attempts_dropped': expected a count, got {_show(attempts_dropped)}")
    backoff = fields.get("backoff_seconds")
    if backoff is not None and (isinstance(backoff, bool) or not isinstance(backoff, (int, float)) or backoff < 0):
        raise InvalidJob(f"{source}: field 'backoff_seconds': expected seconds, got {_show(backoff)}")
    reason = fields.get("reason")
    if reason is not None and reason not in REASONS:
        raise InvalidJob(f"{source}: field 'reason': expected one of {', '.join(REASONS)}, got {_show(reason)}")
    for name in ("dropped_as", "error", "skipped_because", "original"):
        if fields.get(name) is not None and not isinstance(fields[name], str):
            raise InvalidJob(f"{source}: field {name!r}: expected text, got {_show(fields[name])}")
    return JobFile(
        job=job,
        submitted_at=submitted_at,
        dropped_as=fields.get("dropped_as"),
        attempt=attempt,
        tries=tries,
        lease=None if lease is None else Lease.from_mapping(job_id, lease),
        backoff_seconds=backoff,
        reason=reason,
        error=fields.get("error"),
        skipped_because=fields.get("skipped_because"),
        original=fields.get("original"),
        attempts=tuple(Attempt.from_mapping(record) for record in attempts),
        attempts_dropped=attempts_dropped,
    )


def tail(text: str, limit_bytes: int = MAX_ERROR_BYTES) -> str:
    """The end of a traceback, at most ``limit_bytes`` of UTF-8: the end says what broke."""
    data = text.encode("utf-8", errors="replace")
    if len(data) <= limit_bytes:
        return text
    return "..." + data[-(limit_bytes - 3) :].decode("utf-8", errors="ignore")


def is_ready(job_file: JobFile, now_wall: float) -> bool:
    """Ready to claim: no backoff to wait out and no ``not_before`` in the future."""
    if job_file.backoff_seconds is not None:
        return False
    if job_file.job.not_before is not None:
        return parse_time(job_file.job.not_before, "not_before").timestamp() <= now_wall
    return True


def _check_plain(value: Any, where: str, depth: int = 0) -> None:
    """Arguments are plain data (JSON-like): no NaN, no odd key types, bounded depth."""
    if depth > 32:
        raise InvalidJob(f"{where}: nested too deeply")
    if value is None or isinstance(value, (bool, int, str)):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidJob(f"{where}: {value!r} is not a finite number")
        return
    if isinstance(value, list):
        for item in value:
            _check_plain(item, where, depth + 1)
        return
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                raise InvalidJob(f"{where}: mapping keys must be strings, got {_show(key)}")
            _check_plain(item, where, depth + 1)
        return
    raise InvalidJob(f"{where}: {_kind(value)} is not plain data")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _kind(value: object) -> str:
    names = {dict: "a mapping", list: "a list", str: "text", type(None): "nothing"}
    return names.get(type(value), type(value).__name__)


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
