"""Fixtures every test composes: a clean environment, a fresh spool, real spool processes.

- ``clean_environ`` (autouse): no SPOOL_* variable leaks in from the developer's shell.
- ``spool_dir``: an initialised spool in tmp_path; ``sp``: a ``Spool`` opened on it.
- ``spool_cli(*args)``: run ``spool ...`` as a real process and return the CompletedProcess.
- ``procs``: start long-running ``spool`` processes; every one is SIGKILLed at teardown.
Helpers (``wait_until``, ``run_spool``, ``Procs``) live in ``support.py``: ``from support import wait_until``.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from spool import Spool
from spool.disk.fsio import fs
from support import ROOT, Procs, run_spool


@pytest.fixture(autouse=True)
def clean_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("SPOOL_"):
            monkeypatch.delenv(name)
    # Processes we start import task modules from the checkout (examples.tasks, test modules).
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))


@pytest.fixture(autouse=True)
def restore_file_mode() -> Iterator[None]:
    """Opening a group-shared spool in-process sets the process's umask and spool's file mode (as it
    must for its own writes): put both back, so no later test inherits them."""
    mode, umask = fs.file_mode, os.umask(0o022)
    os.umask(umask)
    yield
    fs.file_mode = mode
    os.umask(umask)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs mounted for the test (root only), always unmounted; skipped, saying why, where
    mount fails. ``support.fill_disk`` fills it."""
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m,mode=0700", "tmpfs", str(mount_point)], capture_output=True, text=True
    )
    if mounted.returncode != 0:
        reason = f"cannot mount a size-capped tmpfs (needs root): {mounted.stderr.strip() or mounted.returncode}"
        print(reason)
        pytest.skip(reason)
    yield mount_point
    if subprocess.run(["umount", str(mount_point)], capture_output=True).returncode != 0:
        subprocess.run(["umount", "-l", str(mount_point)], capture_output=True)


@pytest.fixture
def spool_dir(tmp_path: Path) -> Path:
    root = tmp_path / "spool"
    Spool.init(root, environ={}).close()
    return root


@pytest.fixture
def sp(spool_dir: Path) -> Iterator[Spool]:
    opened = Spool(spool_dir, environ={})
    yield opened
    opened.close()


@pytest.fixture
def spool_cli(spool_dir: Path) -> Callable[..., subprocess.CompletedProcess[str]]:
    def call(*args: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
        return run_spool(*args, spool=spool_dir, **kwargs)  # type: ignore[arg-type]

    return call


@pytest.fixture
def procs(spool_dir: Path, tmp_path: Path) -> Iterator[Procs]:
    logs = tmp_path / "proc-logs"
    logs.mkdir()
    started = Procs(spool_dir, logs)
    yield started
    started.kill_all()


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Callable[[str], Path]]:
    """``tmpfs("4m")``: a tmpfs of that size mounted for the test, always unmounted."""
    mounted: list[Path] = []

    def mount(size: str) -> Path:
        point = tmp_path / f"disk-{len(mounted)}"
        point.mkdir()
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(point)],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            reason = f"cannot mount a size-capped tmpfs (needs root): {done.stderr.strip() or done.returncode}"
            print(reason)
            pytest.skip(reason)
        mounted.append(point)
        return point

    yield mount
    for point in mounted:
        if subprocess.run(["umount", str(point)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(point)], capture_output=True)
