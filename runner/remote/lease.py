"""What ``POST /v1/leases`` hands a remote worker, checked as input from the network.

The lease's id goes into the URLs of the worker's later calls and its numbers drive the beat
loop, so each field is checked before the worker acts on any of it; a lease that fails is a
``Refused`` (the server is not one this worker can work for).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from spool import registry
from spool.base.errors import SpoolError
from spool.disk import is_valid_id
from spool.job import MAX_SECONDS

__all__ = ["Refused", "RemoteLease"]


class Refused(SpoolError):
    """The server refused this worker for good (a revoked token, the wrong role, a bad request)."""


@dataclass(frozen=True)
class RemoteLease:
    """What ``POST /v1/leases`` handed out: enough to run the attempt and name its fence."""

    job_id: str
    attempt: int
    fence: str
    task: str
    args: dict[str, Any]
    timeout_seconds: float
    tries_left: int
    heartbeat_seconds: float
    # {parent_id: result} (``runner.attempt.parents``); {} without parents or from an older server.
    parent_results: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_reply(cls, body: Any) -> RemoteLease:
        """The lease in a 200's body, checked as input from the network: an id that is a job id
        (it goes into the URLs of our later calls), a task name, whole numbers, finite seconds
        (a NaN interval would spin the beat loop, an infinite one never beat). Refused if not."""
        try:
            lease = body["lease"]
            made = cls(
                job_id=str(lease["id"]),
                attempt=_whole(lease["attempt"]),
                fence=str(lease["fence"]),
                task=str(lease["task"]),
                args=_mapping(lease["args"], "args"),
                timeout_seconds=_seconds(lease["timeout_seconds"]),
                tries_left=_whole(lease["tries_left"]),
                heartbeat_seconds=max(_seconds(lease["heartbeat_seconds"]), 0.05),
                parent_results=_mapping(lease.get("parent_results", {}), "parent_results"),
            )
        except (KeyError, TypeError, ValueError) as err:
            raise Refused(f"the server's lease is not one this worker understands: {err!r}") from None
        if not is_valid_id(made.job_id) or not registry.is_valid_task_name(made.task) or made.attempt < 1:
            raise Refused(f"the server's lease names no job this worker can take: {str(body)[:200]!r}")
        if not all(isinstance(name, str) for name in made.args) or not 0 < len(made.fence) <= 64:
            raise Refused(f"the server's lease is not one this worker understands: {str(body)[:200]!r}")
        if not all(is_valid_id(parent) for parent in made.parent_results):
            raise Refused(f"the server's lease names parents that are no job ids: {str(body)[:200]!r}")
        return made


def _mapping(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError(f"expected the {what} as an object, got {type(value).__name__}")
    return value


def _whole(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"expected a whole number, got {value!r:.60}")
    return value


def _seconds(value: Any) -> float:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 < value <= MAX_SECONDS:
        raise ValueError(f"expected seconds from 0 to 100 years, got {value!r:.60}")
    return float(value)
