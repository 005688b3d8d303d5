"""Ending an attempt child's process: is it gone, kill its group, retire an idle one.

The child leads its own process group (``runner.attempt.child``), so a kill of the group also
ends what a handler or a shell job started in it.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import time


def has_exited(pid: int) -> bool:
    """Whether our child ``pid`` has exited, without reaping it."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def killpg(pid: int) -> None:
    # RACE: pid reuse. Callers kill before they reap: until then the child is at worst a
    # zombie, so no other process can have been given its pid (our process group id).
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def retire(proc: subprocess.Popen[bytes], pidfd: int) -> None:
    """Give an idle child whose request pipe is closed 1 s to exit; then kill its group, reap."""
    deadline = time.monotonic() + 1.0
    while not has_exited(proc.pid) and (left := deadline - time.monotonic()) > 0:
        select.select([pidfd] if pidfd >= 0 else [], [], [], left if pidfd >= 0 else 0.01)
    killpg(proc.pid)  # also ends what handlers left running in the group
    proc.wait()
    if pidfd >= 0:
        os.close(pidfd)
