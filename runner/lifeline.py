"""Tie a process's life to its parent's: when the parent dies, the kernel kills this one.

Used by the attempt child (so a killed worker takes its running attempt with it) and by every
process a supervisor starts (so a killed supervisor takes its children with it).
"""

from __future__ import annotations

import ctypes
import os
import signal

_PR_SET_PDEATHSIG = 1


def die_with_parent(expected_parent_pid: int) -> None:
    """Ask the kernel for SIGKILL when our parent exits; exit now if it already has.

    RACE: the parent may die between our fork and this call; PDEATHSIG would then never fire,
    so we compare getppid() with the pid the parent told us after arming it.
    """
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != expected_parent_pid:
        os._exit(1)
