"""The task the queue-limit proofs run (tests/crash/test_queue_limits_real.py and
tests/api/test_remote_queue_limits.py), imported by their spool processes with ``--import
limit_tasks`` (tests/ on PYTHONPATH).

``interval(folder, seconds)`` records its own run in ``folder/<job id>.<attempt>``, one
``os.write`` of an O_APPEND file per line, so a line is whole or absent:

    start <wall time> <pid> <parent pid> <pid's start time in clock ticks>
    peers <n> <job id>.<attempt> ...   every other attempt of the folder running at this instant
    end <wall time>                    written after the nap, before the handler returns

The parent pid is the worker (local or remote) whose attempt child runs the handler, so a test
knows whom to SIGKILL to take a slot holder down. "Running" for ``peers`` is: its file has a
start line and no end line, and its pid is still that process (same start time, not a zombie).
A handler killed with its worker never writes its end line; ``peers`` then counts it for exactly
as long as its process lives, which is what the tests check the kernel ends with the worker.
``read_runs`` parses a folder for the tests.
"""

from __future__ import annotations

import os
import select
import time
from dataclasses import dataclass
from pathlib import Path

from spool import current, task


def _nap(seconds: float) -> None:
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        select.select([], [], [], left)


def start_ticks(pid: int) -> int | None:
    """The process's start time (field 22 of /proc/PID/stat), or None when it is gone or a zombie."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return None if fields[0] in ("Z", "X") else int(fields[19])


@dataclass(frozen=True)
class Run:
    """One attempt's file: what its handler wrote."""

    name: str  # <job id>.<attempt>
    job_id: str
    attempt: int
    start: float
    pid: int
    ppid: int
    ticks: int
    peers: tuple[str, ...] | None  # None: killed before it looked
    end: float | None  # None: killed before it ended

    def is_alive(self) -> bool:
        return start_ticks(self.pid) == self.ticks


def read_run(path: Path) -> Run | None:
    """The attempt's run, or None while its start line is not written yet."""
    try:
        lines = path.read_text(encoding="ascii").splitlines()
    except FileNotFoundError:
        return None
    start: list[str] = []
    peers: tuple[str, ...] | None = None
    end: float | None = None
    for line in lines:
        word, *rest = line.split()
        if word == "start":
            start = rest
        elif word == "peers":
            peers = tuple(rest[1:])
        elif word == "end":
            end = float(rest[0])
    if not start:
        return None
    job_id, attempt = path.name.rsplit(".", 1)
    at, pid, ppid, ticks = start
    return Run(path.name, job_id, int(attempt), float(at), int(pid), int(ppid), int(ticks), peers, end)


def read_runs(folder: Path) -> list[Run]:
    found = [read_run(path) for path in sorted(folder.iterdir()) if not path.name.startswith(".")]
    return [run for run in found if run is not None]


@task("interval")
def interval(folder: str, seconds: float = 0.3) -> dict[str, object]:
    """Record this attempt's start, the attempts of ``folder`` running beside it, and its end."""
    attempt = current()
    me = f"{attempt.job_id}.{attempt.attempt}"
    pid = os.getpid()
    fd = os.open(os.path.join(folder, me), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, f"start {time.time():.6f} {pid} {os.getppid()} {start_ticks(pid)}\n".encode())
        others = [run for run in read_runs(Path(folder)) if run.name != me and run.end is None and run.is_alive()]
        # A peer that ended between our listing and its end line is counted: we may over-count, never under.
        os.write(fd, f"peers {len(others)} {' '.join(run.name for run in others)}\n".encode())
        _nap(seconds)
        os.write(fd, f"end {time.time():.6f}\n".encode())
    finally:
        os.close(fd)
    return {"attempt": attempt.attempt, "pid": pid}
