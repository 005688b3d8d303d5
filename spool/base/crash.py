"""Crash points: ``SPOOL_CRASH_AT=<role>:<step>`` makes the process SIGKILL itself there.

Every step of every transition calls ``point(step)``; the process declares its role once at start
(``arm(role, environ)``): ``submit``, ``worker``, ``coordinator``, ``serve``, ``dispatch``, and
``admin`` for the commands a person runs to cancel, requeue or purge. Unarmed, a point is one comparison against
``None``. ``CRASH_POINTS`` is the whole table, written here rather than gathered from the modules
at import, so it is complete without importing anything; ``spool crash-points`` prints it,
tests/unit/test_crash_table.py checks it against every ``point()`` in the source, and the crash
matrix runs every listed point.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Mapping

# role -> the steps that role's process can reach, in the order `spool crash-points` lists them.
CRASH_POINTS: dict[str, tuple[str, ...]] = {
    "worker": (
        "claim-after-reserve",  # the ledger rows 'leased' (a queue's slot taken), the files still in pending/
        "claim-after-heartbeat",  # the lease's first heartbeat written, the job still in pending/
        "claim-after-rename",
        "after-claim",
        "claim-after-start",  # a worker's claim counted and its handler sent, its content not yet written
        "complete-after-stage",
        "after-result",
        "complete-after-move",
        "fail-after-rename",
        "after-fail",
        "bury-after-rename",
        "release-after-rename",
        "result-aside-after-rename",  # a claim found a result the job never earned: moved to dead/, not yet a record
        "claim-batch-after-sync",  # a batch claim's files staged in tmp/ and synced, nothing renamed
        "claim-batch-after-member",  # after each member's two renames (killed after the first), leased/ not fsync'd
        "complete-batch-after-sync",  # a batch's results and done files staged and synced, nothing linked
        "complete-batch-after-link",  # after each member's result link (killed after the first), results/ not fsync'd
        "complete-batch-after-rename",  # after each rename into done/ (killed after the first), done/ not fsync'd
    ),
    "coordinator": (
        "expire-after-rename",
        "after-expire",
        "bury-after-rename",
        "ingest-after-rename",
        "after-ingest",
        "result-aside-after-rename",  # reconcile settling a job with a result it never earned
        "requeue-by-hand-after-rename",
        "promote-after-rename",
        "ready-after-rewrite",
        "fire-after-begin",  # a schedule's record says its slot is being fired (durable), nothing submitted
        # A schedule's firing is an ordinary keyed submit, so it stops at submit's steps:
        "after-key-check",  # slot due, its key not taken, nothing written
        "after-key",  # the slot's key reserved (durable), no job
        "after-commit",  # the slot's job renamed into pending/, the folder not yet fsync'd
        "after-submit",  # the job durable, no ledger row, the schedule's record still says "being fired"
        "fire-after-record",  # the schedule's record says its slot fired, with its job (durable)
    ),
    "admin": (
        "bury-after-rename",  # `spool cancel` of a pending or waiting job
        "requeue-after-rename",
        "purge-after-rename",
        "purge-after-fired",  # a schedule's slot job about to be purged: its firing recorded first (durable)
    ),
    "serve": (  # `spool serve` runs the same moves as submit, a person's cancel and requeue, a worker's complete
        "after-key-check",  # POST /v1/jobs: the key not taken, nothing written
        "after-key",
        "after-commit",
        "after-submit",
        "bury-after-rename",  # POST /v1/jobs/{id}/cancel of a pending or waiting job
        "requeue-after-rename",  # POST /v1/jobs/{id}/requeue
        "after-result",  # POST /v1/leases/{id}/complete: the result linked, the job still in leased/
        "complete-after-move",  # ... the job in done/, no ledger row, no answer sent
        "run-after-record",  # the dashboard's "run now": its job durable and noted as the schedule's last firing
        # A runner's claim (POST /v1/leases for run-one or a remote worker) is the worker's claim:
        "claim-after-reserve",
        "claim-after-heartbeat",
        "claim-after-rename",
        "after-claim",
        # ... and a runner's fence (POST /v1/runners/{r}/fence, a revoke) is the coordinator's expire:
        "expire-after-rename",
        "after-expire",
    ),
    "dispatch": (  # `spool dispatch`: the engine holds what it was handed; a restarted dispatcher adopts it
        "after-engine-submit",  # the engine took an engine job, the dispatcher has not noted it in flight
        "after-fence",  # a failed engine job's runner fenced by the server, the engine job not yet let go
    ),
    "submit": (
        "after-key-check",
        "after-key",
        "after-commit",
        "after-submit",
        "batch-after-sync",  # submit_many: a round's files staged in tmp/ and synced, nothing linked or renamed
        "batch-after-keys",  # a round's keys reserved and keys/ fsync'd, no job renamed
        "batch-after-commit",  # after each member's rename (killed after the first), before the folder fsync
        "batch-after-submit",  # every round durable, no ledger row yet
        "run-after-record",  # `spool schedule run`: its job durable and noted as the schedule's last firing
    ),
}

_target: str | None = None


def all_points() -> list[str]:
    """Every ``role:step`` a ``SPOOL_CRASH_AT`` can name, in the table's order."""
    return [f"{role}:{step}" for role, steps in CRASH_POINTS.items() for step in steps]


def arm(role: str, environ: Mapping[str, str]) -> None:
    """Set this process's role and read ``SPOOL_CRASH_AT`` once: only a point of this role fires."""
    global _target
    target = environ.get("SPOOL_CRASH_AT") or None
    _target = target.split(":", 1)[1] if target and target.split(":", 1)[0] == role else None


def unknown_target(value: str) -> str | None:
    """A warning if ``value`` (a SPOOL_CRASH_AT) names no listed point, else None."""
    points = all_points()
    if value in points:
        return None
    import difflib  # start-up: only a mistyped SPOOL_CRASH_AT needs it

    close = difflib.get_close_matches(value, points, n=1)
    role = value.split(":", 1)[0]
    hint = (
        f"; did you mean {close[0]}?"
        if close
        else (f"; {role} has {', '.join(CRASH_POINTS[role])}" if CRASH_POINTS.get(role) else "")
    )
    return f"SPOOL_CRASH_AT={value} is not a crash point{hint} (see `spool crash-points`)"


def point(step: str) -> None:
    """SIGKILL this process if it was armed for ``step``."""
    if _target is None or _target != step:
        return
    os.kill(os.getpid(), signal.SIGKILL)
