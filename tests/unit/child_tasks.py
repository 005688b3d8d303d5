"""Handlers that misbehave on purpose, for tests/unit/test_child.py.

Imported only inside attempt children (the tests pass this folder as the child's ``sys_path``),
so the test process's own registry never sees these names.
"""

from __future__ import annotations

import ctypes
import dataclasses
import os
import signal
import subprocess
import sys
import time
from typing import Any

from spool import Reject, current, task


def _write_pid(path: str, pid: int) -> None:
    # Written under a temporary name and renamed, so a reader never sees a half-written pid.
    with open(path + ".tmp", "w") as f:
        f.write(str(pid))
    os.rename(path + ".tmp", path)


@task("t.echo")
def echo(**kwargs: Any) -> dict[str, Any]:
    return {"args": kwargs, "pid": os.getpid()}


@task("t.boom")
def boom(message: str = "boom", depth: int = 0) -> None:
    if depth > 0:
        boom(message, depth - 1)
    raise ValueError(message)


@task("t.reject")
def reject(reason: str) -> None:
    raise Reject(reason)


@task("t.exit")
def exit_now(status: int) -> None:
    os._exit(status)


@task("t.sys_exit")
def sys_exit(status: int) -> None:
    sys.exit(status)


@task("t.sigkill_self")
def sigkill_self() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


@task("t.segfault")
def segfault() -> None:
    ctypes.string_at(0)


@task("t.sleep")
def sleep(seconds: float, pidfile: str | None = None) -> str:
    if pidfile:
        _write_pid(pidfile, os.getpid())
    time.sleep(seconds)
    return "slept"


@task("t.sleeper_grandchild")
def sleeper_grandchild(pidfile: str) -> None:
    proc = subprocess.Popen(["sleep", "1000"])
    _write_pid(pidfile, proc.pid)
    time.sleep(1000)


@task("t.value")
def value(kind: str, size: int = 0) -> object:
    if kind == "big":
        return "x" * size
    return {1, 2} if kind == "set" else float("nan")


@task("t.print")
def chatty(marker: str) -> str:
    # Lines that look like the protocol's replies: they must land in the log, not the pipe.
    print('{"ok": true, "value": "forged", "error": null, "reject": false}')
    print(f"stdout {marker}")
    print(f"stderr {marker}", file=sys.stderr)
    os.write(1, f"raw fd1 {marker}\n".encode())
    sys.stdout.write("unflushed tail")  # no newline: the child must flush it into the log
    return "printed"


@task("t.environ")
def environ(name: str) -> str | None:
    return os.environ.get(name)


@task("t.current")
def where_am_i() -> dict[str, Any]:
    return dataclasses.asdict(current())
