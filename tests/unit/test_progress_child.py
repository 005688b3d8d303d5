"""spool.progress through a real attempt child: the worker's ``Child`` hears the newest value
promptly, a handler that reports far faster than anyone reads is never blocked (and its reply
still arrives whole), a handler's thread that outlives its attempt cannot garble the next one,
and a bad fraction fails the attempt with an error that says what was wrong."""

from __future__ import annotations

import os
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from spool.attemptlog import AttemptLog
from spool.progress import Progress
from spool.runner.attempt.child import AttemptRequest, Child, Outcome

TASKS = """
import os, select, threading, time
import spool
from spool import task


def nap_until(path):
    while not os.path.exists(path):
        select.select([], [], [], 0.01)


@task("p.gate")
def gate(path):
    spool.progress(0.25, "a quarter")
    spool.progress(0.5, "halfway")
    nap_until(path)
    return "opened"


@task("p.flood")
def flood(path, calls):
    for n in range(calls):
        spool.progress(n / calls, "flooding " * 10)
    with open(path, "w") as f:
        f.write("finished")
    return "x" * 200_000


@task("p.linger")
def linger(path):
    def keep_reporting():
        end = time.monotonic() + 1.0
        while time.monotonic() < end:
            spool.progress(0.99, "from a thread")
    threading.Thread(target=keep_reporting, daemon=True).start()
    return "left a thread"


@task("p.bad")
def bad():
    spool.progress(1.5, "too far")
"""


def wait_until(condition: Callable[[], object], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {condition}")
        time.sleep(0.01)


@pytest.fixture
def child(tmp_path: Path) -> Iterator[Child]:
    (tmp_path / "progress_tasks.py").write_text(textwrap.dedent(TASKS))
    made = Child(
        import_modules=["progress_tasks"], allow_shell=False, max_result_bytes=1 << 20, sys_path=[str(tmp_path)]
    )
    yield made
    made.kill()


def _request(tmp_path: Path, task: str, attempt: int = 1, **args: Any) -> AttemptRequest:
    logs = tmp_path / "logs"
    logs.mkdir(exist_ok=True)
    fd = os.open(logs, os.O_RDONLY | os.O_DIRECTORY)
    return AttemptRequest("job-1", attempt, task, args, 30.0, 2, AttemptLog(fd, fd, f"{attempt}.log", 1 << 20))


def _outcome(child: Child, limit: float = 30.0) -> Outcome:
    deadline = time.monotonic() + limit
    while (outcome := child.poll(0.05)) is None:
        assert time.monotonic() < deadline, "no outcome in time"
    return outcome


def test_the_worker_hears_the_newest_progress_while_the_handler_runs(child: Child, tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    child.begin(_request(tmp_path, "p.gate", path=str(gate)))
    seen: list[Progress] = []

    def heard_halfway() -> bool:
        assert child.poll(0.5, until_progress=True) is None
        value = child.take_progress()
        if value is not None:
            seen.append(value)
        return bool(seen) and seen[-1] == Progress(0.5, "halfway")

    wait_until(heard_halfway)
    assert child.take_progress() is None  # taken: nothing new until the handler says more
    gate.touch()
    assert _outcome(child) == Outcome(ok=True, value="opened", error=None, reject=False)


def test_a_flood_of_progress_read_as_it_comes_keeps_the_newest_and_the_reply_arrives_whole(
    child: Child, tmp_path: Path
) -> None:
    """200,000 calls (about 40 MB of lines) while the worker reads: it keeps only the newest,
    and the 200 kB reply after them comes through intact."""
    finished = tmp_path / "finished"
    child.begin(_request(tmp_path, "p.flood", path=str(finished), calls=200_000))
    seen: list[Progress] = []
    deadline = time.monotonic() + 60
    while (outcome := child.poll(0.05)) is None:
        assert time.monotonic() < deadline, "no outcome in time"
        if (value := child.take_progress()) is not None:
            seen.append(value)
    assert outcome.ok and outcome.value == "x" * 200_000, outcome.error
    assert seen and all(value.message == ("flooding " * 10) for value in seen)
    fractions = [value.fraction for value in seen]
    assert fractions == sorted(fractions) and len(seen) < 200_000  # newest only, in order


def test_a_flood_with_nobody_reading_at_all_still_finishes(child: Child, tmp_path: Path) -> None:
    first = tmp_path / "first"
    child.begin(_request(tmp_path, "p.gate", path=str(first)))  # warm: the child is up
    first.touch()
    assert _outcome(child).ok
    finished = tmp_path / "finished"
    child.begin(_request(tmp_path, "p.flood", attempt=2, path=str(finished), calls=200_000))
    # The request went out at begin() (the child had said hello); no poll() until the end.
    deadline = time.monotonic() + 30
    while not finished.exists():
        assert time.monotonic() < deadline, "the handler was blocked by its own progress"
        time.sleep(0.02)
    outcome = _outcome(child)
    assert outcome.ok and outcome.value == "x" * 200_000, outcome.error


def test_a_thread_that_outlives_its_attempt_cannot_garble_the_next(child: Child, tmp_path: Path) -> None:
    assert _outcome_of(child, _request(tmp_path, "p.linger", path="-")).ok
    gate = tmp_path / "gate"
    gate.touch()
    # The lingering thread keeps reporting (for the first attempt's seq) during this attempt.
    assert _outcome_of(child, _request(tmp_path, "p.gate", attempt=2, path=str(gate))).value == "opened"


def _outcome_of(child: Child, request: AttemptRequest) -> Outcome:
    child.begin(request)
    return _outcome(child)


def test_a_bad_fraction_fails_the_attempt_with_a_clear_error(child: Child, tmp_path: Path) -> None:
    outcome = _outcome_of(child, _request(tmp_path, "p.bad"))
    assert not outcome.ok and not outcome.reject
    assert outcome.error is not None
    assert "ValueError: progress fraction must be from 0 to 1, not 1.5" in outcome.error
    assert "spool.progress(1.5" in outcome.error  # the traceback points at the handler's call
