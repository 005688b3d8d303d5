"""Helpers shared by the tests: the checkout's root, running ``spool``, waiting with a deadline."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from spool.disk import fsio
from spool.disk.fsio import RealFS

ROOT = Path(__file__).resolve().parent.parent
SPOOL_CMD = [sys.executable, "-m", "spool.cli"]


def wait_until(
    condition: Callable[[], object], timeout: float = 10.0, interval: float = 0.02, message: str = "condition"
) -> object:
    """Return the condition's first truthy value; fail the test if the deadline passes first."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {message}")
        time.sleep(interval)


def run_spool(
    *args: str,
    spool: Path | None = None,
    env: dict[str, str] | None = None,
    input: bytes | None = None,
    timeout: float = 60.0,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    argv = [*SPOOL_CMD, *(["--spool", str(spool)] if spool else []), *args]
    return subprocess.run(
        argv,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        input=input.decode() if input else None,
        timeout=timeout,
        cwd=cwd or ROOT,
    )


def kill_groups(procs: list[subprocess.Popen[bytes]]) -> None:
    """SIGKILL each still-running process's whole group (each was started in a session of its own)."""
    for proc in procs:
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()


class Procs:
    """Long-running spool processes, each in its own process group, killed at teardown."""

    def __init__(self, spool: Path, logs: Path) -> None:
        self.spool, self.logs = spool, logs
        self.started: list[subprocess.Popen[bytes]] = []

    def start(self, *args: str, env: dict[str, str] | None = None, name: str = "proc") -> subprocess.Popen[bytes]:
        return self.launch([*SPOOL_CMD, "--spool", str(self.spool), *args], env=env, name=name)

    def launch(
        self, argv: list[str], *, env: dict[str, str] | None = None, name: str = "proc", answer: bool = False
    ) -> subprocess.Popen[bytes]:
        """Any command, logged to ``<name>-<n>.log``; with ``answer``, its stdout is a pipe the test reads."""
        log = open(self.logs / f"{name}-{len(self.started)}.log", "wb")
        proc = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE if answer else log,
            stderr=log if answer else subprocess.STDOUT,
            env={**os.environ, **(env or {})},
            cwd=ROOT,
            start_new_session=True,
        )
        log.close()
        self.started.append(proc)
        return proc

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM, so nothing is cut mid-move by the test itself; SIGKILL only past the deadline."""
        for proc in self.started:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.started:
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                pass
        self.kill_all()

    def kill_all(self) -> None:
        kill_groups(self.started)

    def output(self) -> str:
        return "\n".join(p.read_text(errors="replace") for p in sorted(self.logs.glob("*.log")))


def fill_disk(path: Path) -> None:
    """Append to ``path`` until its filesystem is full (ENOSPC); any other error fails the test."""
    with open(path, "ab", buffering=0) as filler:
        while True:
            try:
                filler.write(b"\0" * 4096)
            except OSError as err:
                assert err.errno == errno.ENOSPC, err
                return


@contextmanager
def behind_the_seam(impl: RealFS) -> Iterator[RealFS]:
    """``impl`` (a recording or fault-injecting RealFS) behind the seam every spool module calls
    (``spool.disk.fsio.use``), and what it replaced put back after, whatever happens inside."""
    previous = fsio.use(impl)
    try:
        yield impl
    finally:
        fsio.use(previous)
