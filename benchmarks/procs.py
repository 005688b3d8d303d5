"""Process helpers of ``benchmarks/peers.py``: start, stop, time and account for child processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.throughput import process_env
from spool.runner.lifeline import die_with_parent

ROOT = Path(__file__).resolve().parent.parent


def env(**extra: str) -> dict[str, str]:
    """``throughput.process_env`` (no SPOOL_* settings, the checkout importable, bytecode cached), plus ``extra``."""
    return {**process_env(), **extra}


CHILDREN: list[subprocess.Popen[Any]] = []


def popen(
    cmd: Sequence[str], environ: dict[str, str], log: Path | None = None, cwd: Path = ROOT
) -> subprocess.Popen[str]:
    """Start ``cmd`` in ``cwd``, in a session of its own, tied to our life (``spool.runner.lifeline``),
    kept in ``CHILDREN`` for whoever cleans up; its output goes to ``log`` or to pipes."""
    parent = os.getpid()
    out = open(log, "ab") if log else subprocess.PIPE  # noqa: SIM115
    proc = subprocess.Popen(
        list(cmd),
        cwd=cwd,
        env=environ,
        stdin=subprocess.DEVNULL,
        stdout=out,
        stderr=subprocess.STDOUT if log else subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=lambda: die_with_parent(parent),
    )
    if log:
        out.close()  # type: ignore[union-attr]
    CHILDREN.append(proc)
    return proc


def kill(proc: subprocess.Popen[Any], first: int = signal.SIGTERM) -> None:
    """``first`` to the process group, SIGKILL after 10 s."""
    for signum in (first, signal.SIGKILL):
        try:
            os.killpg(proc.pid, signum)
            proc.wait(10)
            return
        except (ProcessLookupError, PermissionError):
            return
        except subprocess.TimeoutExpired:
            continue


def tree(roots: list[int]) -> list[int]:
    found, queue = list(roots), list(roots)
    while queue:
        pid = queue.pop()
        try:
            children = [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
        except OSError:
            children = []
        found += children
        queue += children
    return found


def cpu_of(pids: list[int]) -> float:
    """CPU seconds of ``pids`` and of the children they reaped (cutime, cstime)."""
    ticks, total = os.sysconf("SC_CLK_TCK"), 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += sum(int(fields[i]) for i in (11, 12, 13, 14)) / ticks
    return total


def run(cmd: list[str], environ: dict[str, str], timeout: float = 300) -> None:
    done = subprocess.run(cmd, cwd=ROOT, env=environ, capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[1:4])} failed: {(done.stdout + done.stderr).strip()[-2000:]}")


def collect(procs: list[subprocess.Popen[str]], timeout: float) -> list[dict[str, Any]]:
    out = []
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=timeout)
        if proc.returncode != 0:
            raise RuntimeError(f"a producer failed ({proc.returncode}): {stderr.strip()[-2000:]}")
        out.append(json.loads(stdout.strip().splitlines()[-1]))
    return out
