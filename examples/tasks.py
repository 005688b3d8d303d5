"""Example task modules: import them with ``spool worker --import spool.examples.tasks``
(installed; from a source checkout ``--import examples.tasks`` works too).

``wordcount`` is built in (``spool.builtin_tasks``); these show the other shapes a handler takes.
"""

from __future__ import annotations

import os
import signal
import time

from spool import Reject, current, task


@task("sleep")
def sleep(seconds: float = 1.0) -> dict[str, float]:
    """Take a while: for timeouts, leases and graceful shutdown."""
    time.sleep(seconds)
    return {"slept": seconds}


@task("echo")
def echo(**args: object) -> dict[str, object]:
    """Return the arguments, with the attempt that ran them."""
    now = current()
    return {"args": args, "job": now.job_id, "attempt": now.attempt}


@task("fail_until")
def fail_until(attempt: int = 2) -> dict[str, int]:
    """Fail every attempt before ``attempt``: retries with backoff in action."""
    if current().attempt < attempt:
        raise RuntimeError(f"attempt {current().attempt} fails on purpose")
    return {"succeeded_on": current().attempt}


@task("reject")
def reject(why: str = "bad input") -> None:
    """End the job dead at once, no retry."""
    raise Reject(why)


@task("crash_worker")
def crash_worker() -> None:
    """SIGKILL the worker that runs this attempt (the child's parent): a job that always crashes its worker."""
    os.kill(os.getppid(), signal.SIGKILL)
    time.sleep(60)


@task("crash_self")
def crash_self() -> None:
    """SIGKILL the attempt's own process."""
    os.kill(os.getpid(), signal.SIGKILL)


@task("touch")
def touch(path: str) -> dict[str, int]:
    """Append a line per run to ``path``: tests count how often a job really ran."""
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(f"{current().job_id} {current().attempt}\n")
    return {"attempt": current().attempt}
