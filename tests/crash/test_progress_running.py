"""spool.progress end to end, with real processes: a handler in a real ``spool worker`` reports
0.5 "halfway" and waits on a file; ``spool status`` (text and --json) shows it while it runs and
shows none once it is done; ``spool wait`` draws it as a bar on a terminal (a pty) and as plain
lines otherwise; a bad fraction fails the attempt with an error that says what was wrong."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import textwrap
import time
from pathlib import Path

import pytest
from support import SPOOL_CMD, ROOT, Procs, run_spool, wait_until

TASKS = """
import os, select
import spool
from spool import task


@task("p.halfway")
def halfway(gate):
    spool.progress(0.5, "halfway")
    while not os.path.exists(gate):
        select.select([], [], [], 0.02)
    return {"ok": True}


@task("p.bad")
def bad():
    spool.progress(1.5, "too far")
"""


@pytest.fixture
def tasks_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "tasks"
    folder.mkdir()
    (folder / "progress_tasks.py").write_text(textwrap.dedent(TASKS))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(folder), os.environ["PYTHONPATH"]]))


def _status(spool_dir: Path, job_id: str) -> dict[str, object]:
    ran = run_spool("status", job_id, "--json", spool=spool_dir)
    assert ran.returncode == 0, ran.stderr
    return json.loads(ran.stdout)  # type: ignore[no-any-return]


def _start(procs: Procs) -> None:
    procs.start("--poll-seconds", "0.2", "worker", "--import", "progress_tasks", name="worker")


def test_status_shows_a_running_handlers_progress(
    spool_dir: Path, procs: Procs, tmp_path: Path, tasks_on_path: None
) -> None:
    gate = tmp_path / "gate"
    job_id = run_spool("submit", "p.halfway", "-a", f"gate={gate}", spool=spool_dir).stdout.strip()
    _start(procs)
    view = wait_until(
        lambda: (v := _status(spool_dir, job_id))["progress"] and v,
        timeout=30,
        message="the progress in spool status --json",
    )
    assert view["state"] == "leased"  # type: ignore[index]
    assert view["progress"] == {"fraction": 0.5, "message": "halfway"}  # type: ignore[index]
    text = run_spool("status", job_id, spool=spool_dir).stdout
    assert "progress:        50% halfway" in text.splitlines()
    gate.touch()
    wait_until(lambda: _status(spool_dir, job_id)["state"] == "done", timeout=30, message="done")
    assert _status(spool_dir, job_id)["progress"] is None
    assert "progress:" not in run_spool("status", job_id, spool=spool_dir).stdout


def test_wait_draws_the_progress_as_a_bar_on_a_terminal_and_as_lines_otherwise(
    spool_dir: Path, procs: Procs, tmp_path: Path, tasks_on_path: None
) -> None:
    gate = tmp_path / "gate"
    job_id = run_spool("submit", "p.halfway", "-a", f"gate={gate}", spool=spool_dir).stdout.strip()
    _start(procs)
    wait_until(lambda: _status(spool_dir, job_id)["progress"], timeout=30, message="progress")
    # Not a terminal: one plain line on stderr per change; stdout keeps only "<id> <state>".
    plain = run_spool("wait", job_id, "--timeout", "1", spool=spool_dir)
    assert plain.returncode == 124
    assert plain.stderr.splitlines() == [f"spool: {job_id}: 50% halfway"]
    assert plain.stdout.split() == [job_id, "leased"]
    # A terminal: stderr is a pty; the bar is redrawn in place with the handler's fraction.
    controller, terminal = pty.openpty()
    try:
        proc = subprocess.Popen(
            [*SPOOL_CMD, "--spool", str(spool_dir), "wait", job_id],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=terminal,
            cwd=ROOT,
        )
        os.close(terminal)
        terminal = -1
        screen = b""
        deadline = time.monotonic() + 30
        while b"halfway" not in screen:
            assert time.monotonic() < deadline, f"no bar with the progress: {screen!r}"
            if select.select([controller], [], [], 0.5)[0]:
                screen += os.read(controller, 4096)
        gate.touch()
        out, _ = proc.communicate(timeout=30)
        while select.select([controller], [], [], 0.2)[0]:
            try:
                chunk = os.read(controller, 4096)
            except OSError:  # EIO: the last writer closed the pty
                break
            if not chunk:
                break
            screen += chunk
    finally:
        os.close(controller)
        if terminal >= 0:
            os.close(terminal)
    assert proc.returncode == 0 and out.decode().split() == [job_id, "done"]
    half = "[" + "#" * 15 + "." * 15 + "]  50% 0/1 ended, 0 done  halfway"
    assert f"\r{half}\x1b[K".encode() in screen, screen
    assert ("\r[" + "#" * 30 + "] 100% 1/1 ended, 1 done\x1b[K").encode() in screen, screen


def test_a_bad_fraction_fails_the_attempt_with_a_clear_error(
    spool_dir: Path, procs: Procs, tasks_on_path: None
) -> None:
    job_id = run_spool("submit", "p.bad", "--max-tries", "1", spool=spool_dir).stdout.strip()
    _start(procs)
    wait_until(lambda: _status(spool_dir, job_id)["state"] == "dead", timeout=30, message="dead")
    error = str(_status(spool_dir, job_id)["error"])
    assert "ValueError: progress fraction must be from 0 to 1, not 1.5" in error
    assert 'spool.progress(1.5, "too far")' in error
