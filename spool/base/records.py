"""The runner's typed records inside a job file: a ``Lease`` and an ``Attempt``, and ``LeaseStatus``.

A lease is one attempt's hold on a job: the fence (job, worker, attempt) every later step of
that attempt names. In a job file it is the ``lease:`` mapping ``{worker, attempt, claimed_at}``
while the job is leased (the id is the file's own). An attempt record is one entry of the file's
``attempts:`` list, ``{attempt, worker, started, ended, outcome, error}``, opened at claim and
closed when the attempt ends. ``to_mapping`` gives exactly the mapping the file holds (same keys,
same order), so a file reads and writes back byte for byte.

``job.decode`` checks a lease's ``worker`` and ``attempt`` and that an attempt record has
exactly its six fields (so a file torn inside its last record never reads as the whole one);
the records' values are otherwise kept as found.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Lease:
    """One attempt's hold on a job: the fence every later step names."""

    job_id: str
    worker: str
    attempt: int
    claimed_at: str | None = None  # in the job file; a worker's own fence leaves it out

    def to_mapping(self) -> dict[str, Any]:
        """The job file's ``lease:`` mapping."""
        return {"worker": self.worker, "attempt": self.attempt, "claimed_at": self.claimed_at}

    @classmethod
    def from_mapping(cls, job_id: str, fields: Mapping[str, Any]) -> Lease:
        return cls(
            job_id=job_id, worker=fields["worker"], attempt=fields["attempt"], claimed_at=fields.get("claimed_at")
        )


class LeaseStatus(enum.StrEnum):
    """What a worker learns of its lease at a heartbeat (``transitions.lease_status``)."""

    HELD = "held"
    LOST = "lost"  # expired, requeued or finished elsewhere
    CANCEL = "cancel"  # a cancel request waits beside the job


ATTEMPT_FIELDS = ("attempt", "worker", "started", "ended", "outcome", "error")


@dataclass(frozen=True)
class Attempt:
    """One attempt's record: opened at claim (``ended`` None), closed with its outcome."""

    attempt: int | None
    worker: str | None
    started: str | None
    ended: str | None = None
    outcome: str | None = None  # done, failed, rejected, expired, lost, released, cancelled, skipped
    error: str | None = None

    @property
    def is_open(self) -> bool:
        return self.ended is None

    def closed(self, *, outcome: str, ended: str, error: str | None) -> Attempt:
        return dataclasses.replace(self, ended=ended, outcome=outcome, error=error)

    def to_mapping(self) -> dict[str, Any]:
        """The record as the job file's ``attempts:`` list holds it."""
        return {
            "attempt": self.attempt,
            "worker": self.worker,
            "started": self.started,
            "ended": self.ended,
            "outcome": self.outcome,
            "error": self.error,
        }

    @classmethod
    def from_mapping(cls, fields: Mapping[str, Any]) -> Attempt:
        return cls(
            attempt=fields.get("attempt"),
            worker=fields.get("worker"),
            started=fields.get("started"),
            ended=fields.get("ended"),
            outcome=fields.get("outcome"),
            error=fields.get("error"),
        )
