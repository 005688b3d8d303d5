"""Issue 17, finding 10: a drop the coordinator can't read is set aside once, never retried for ever.

The coordinator and fsck run as ``nobody`` (``setpriv``) on a spool that ``nobody`` owns; the drop
is root's, mode 0600, so the real open(2) in the real ingest fails with EACCES (root itself
bypasses 0600, so the runner can't be root here). The drop must end as an invalid record in
dead/ (its reason logged once, with its path), and fsck must report it while it waits.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import ROOT, Procs, wait_until

from spool.yaml.safe import load_yaml

NOBODY = 65534
BOOT = (
    "import runpy, site, sys; site.addsitedir(sys.argv[1]); sys.argv = ['spool', *sys.argv[2:]]; "
    "runpy.run_module('spool.cli', run_name='__main__', alter_sys=True)"
)


def _python_for_nobody() -> str | None:
    """An interpreter of our version that ``nobody`` can run (ours may sit under /root, 0700)."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for candidate in (f"/usr/bin/{version}", f"/usr/local/bin/{version}", sys.executable):
        if os.path.exists(candidate) and shutil.which("setpriv"):
            argv = _as_nobody(candidate, "--version")
            if subprocess.run(argv, capture_output=True, cwd="/").returncode == 0:
                return candidate
    return None


def _as_nobody(python: str, *spool_args: str) -> list[str]:
    return [
        "setpriv",
        f"--reuid={NOBODY}",
        f"--regid={NOBODY}",
        "--clear-groups",
        "--",
        python,
        "-c",
        BOOT,
        sysconfig.get_paths()["purelib"],
        *spool_args,
    ]


@pytest.fixture
def nobody_spool() -> Iterator[tuple[str, Path]]:
    if os.geteuid() != 0:
        pytest.skip("needs root, to run the runner as nobody")
    python = _python_for_nobody()
    if python is None:
        pytest.skip("no interpreter nobody can run with setpriv")
    probe = subprocess.run(_as_nobody(python, "--help"), capture_output=True, text=True, cwd="/", timeout=60)
    if probe.returncode != 0:  # the venv or the checkout sits in a folder nobody can't enter
        pytest.skip(f"nobody can't import the installed spool: {probe.stderr.strip()[-200:]}")
    home = Path(tempfile.mkdtemp(prefix="spool-nobody-", dir="/tmp"))
    try:
        home.chmod(0o755)
        os.chown(home, NOBODY, NOBODY)
        yield python, home / "spool"
    finally:
        shutil.rmtree(home, ignore_errors=True)


def _spool(python: str, root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        _as_nobody(python, "--spool", str(root), *args), capture_output=True, text=True, cwd="/", timeout=60
    )


def _drop(root: Path, name: str, text: str, mode: int) -> None:
    """Written by root, under a dot name, then renamed in (as the README tells a user to)."""
    staging = root / "pending" / f".{name}.partial"
    staging.write_text(text)
    staging.chmod(mode)
    os.rename(staging, root / "pending" / name)


def _dropped_as(root: Path, folder: str, name: str) -> dict[str, object] | None:
    for path in (root / folder).glob("*.yaml"):
        text = load_yaml(path.read_bytes(), max_bytes=1 << 20, source=str(path))
        if isinstance(text, dict) and text.get("dropped_as") == name:
            return text
    return None


def test_an_unreadable_drop_is_set_aside_once_and_reported(nobody_spool: tuple[str, Path], tmp_path: Path) -> None:
    python, root = nobody_spool
    assert _spool(python, root, "init").returncode == 0
    (root / "config.yaml").write_text("poll_seconds: 0.2\n")
    os.chown(root / "config.yaml", NOBODY, NOBODY)
    _drop(root, "unreadable.yaml", "task: echo\n", 0o600)

    waiting = _spool(python, root, "fsck")
    assert waiting.returncode == 1, waiting.stdout + waiting.stderr
    assert "pending/unreadable.yaml: a drop that can't be read (Permission denied)" in waiting.stdout, waiting.stdout

    procs = Procs(root, tmp_path)
    log_path = tmp_path / "coordinator.log"
    with open(log_path, "wb") as log:
        coordinator = subprocess.Popen(
            _as_nobody(python, "--spool", str(root), "coordinator"),
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd="/",
            start_new_session=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
    procs.started.append(coordinator)  # type: ignore[arg-type]
    try:
        record = wait_until(
            lambda: _dropped_as(root, "dead", "unreadable.yaml"),
            timeout=20,
            message="the unreadable drop set aside in dead/",
        )
        assert isinstance(record, dict) and record["reason"] == "invalid", record
        assert "can't be read (Permission denied)" in str(record["error"]), record
        assert not (root / "pending" / "unreadable.yaml").exists()
        # Later passes run (a readable drop is ingested after it) and say nothing more about it.
        _drop(root, "readable.yaml", "task: echo\n", 0o644)
        wait_until(lambda: _dropped_as(root, "pending", "readable.yaml"), timeout=20, message="the readable drop")
        lines = [line for line in log_path.read_text().splitlines() if "Permission denied" in line]
        assert len(lines) == 1 and "pending/unreadable.yaml" in lines[0], lines
    finally:
        procs.stop()
    checked = _spool(python, root, "fsck")
    assert checked.returncode == 0, checked.stdout + checked.stderr
