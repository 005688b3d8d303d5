"""The attempt child with real processes: outcomes, crashes, timeouts, kills, and its lifeline.

Every wait is on a condition with a deadline; every child is killed by the fixture at teardown.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import spool
from spool.attemptlog import AttemptLog
from spool.runner.attempt.child import ERROR_BYTES, AttemptRequest, Child, Outcome

HERE = Path(__file__).resolve().parent
ROOT = Path(spool.__file__).resolve().parents[1]


def wait_until(condition: Callable[[], object], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {condition}")
        time.sleep(0.01)


def gone(pid: int) -> bool:
    """The process has exited (a zombie counts: the sandbox's init may never reap orphans)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


def pid_of(outcome: Outcome) -> int:
    """The child pid a ``t.echo`` attempt reported."""
    assert outcome.ok and isinstance(outcome.value, dict), outcome
    return int(outcome.value["pid"])


def read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text())
    except (FileNotFoundError, ValueError):
        return None


OPTIONS: dict[str, Any] = {
    "import_modules": ["child_tasks"],
    "allow_shell": False,
    "max_result_bytes": 1 << 20,
    "sys_path": [str(HERE)],
}


@pytest.fixture
def make_child() -> Iterator[Callable[..., Child]]:
    """Children with their own settings, killed at teardown."""
    made: list[Child] = []

    def make(**overrides: Any) -> Child:
        made.append(Child(**{**OPTIONS, **overrides}))
        return made[-1]

    yield make
    for child in made:
        child.kill()


@pytest.fixture(scope="module")
def shared_child() -> Iterator[Child]:
    """One child (shell allowed) for the tests that take the defaults: a start costs ~0.2 s.

    Tests that crash or kill it need no care: the next begin() starts a fresh one.
    """
    child = Child(**{**OPTIONS, "allow_shell": True})
    yield child
    child.kill()


class Runner:
    """begin() + poll() with a deadline, numbering attempts and giving each its own log."""

    def __init__(self, child: Child, logs: Path) -> None:
        self.child, self.logs, self.count = child, logs, 0
        self.logs_fd = os.open(logs, os.O_RDONLY | os.O_DIRECTORY)
        self.current_log: AttemptLog | None = None

    def request(self, task: str, timeout: float = 30.0, **args: Any) -> AttemptRequest:
        self.count += 1
        self.current_log = AttemptLog(self.logs_fd, self.logs_fd, f"attempt-{self.count}.log", 1 << 20)
        return AttemptRequest("job-1", self.count, task, args, timeout, 2, self.current_log)

    def wait(self, limit: float = 30.0) -> Outcome:
        deadline = time.monotonic() + limit
        while (outcome := self.child.poll(0.05)) is None:
            assert time.monotonic() < deadline, "no outcome in time"
        if self.current_log is not None:
            self.current_log.close()
        return outcome

    def run(self, task: str, timeout: float = 30.0, **args: Any) -> Outcome:
        self.child.begin(self.request(task, timeout, **args))
        return self.wait()

    def log(self) -> str:
        return (self.logs / f"attempt-{self.count}.log").read_text(errors="replace")


@pytest.fixture
def run(shared_child: Child, tmp_path: Path) -> Iterator[Runner]:
    runner = Runner(shared_child, tmp_path)
    yield runner
    os.close(runner.logs_fd)
    try:
        if shared_child.poll(0) is None:
            shared_child.kill()  # a test that failed mid-attempt leaves the next one a clean child
    except RuntimeError:
        pass  # no attempt in flight: the child stays warm for the next test


def test_ok_result_and_the_child_is_reused(run: Runner) -> None:
    first = run.run("t.echo", n=1, s="ü")
    second = run.run("t.echo", n=2)
    value = {"args": {"n": 1, "s": "ü"}, "pid": run.child.pid}
    assert first == Outcome(ok=True, value=value, error=None, reject=False)
    assert second.ok and pid_of(second) == pid_of(first)


def test_builtin_wordcount_runs_in_the_child(run: Runner, tmp_path: Path) -> None:
    (tmp_path / "book.txt").write_text("one two\nthree\n")
    assert run.run("wordcount", path=str(tmp_path / "book.txt")).value == {"words": 3}


def test_exception_gives_the_traceback_tail(run: Runner) -> None:
    outcome = run.run("t.boom", message="it broke")
    assert not outcome.ok and not outcome.reject and outcome.error is not None
    assert outcome.error.startswith("Traceback (most recent call last):")
    assert "child_tasks.py" in outcome.error and "spool/runner/child.py" not in outcome.error
    assert outcome.error.rstrip().endswith("ValueError: it broke")


def test_long_traceback_keeps_its_end_within_4_kib(run: Runner) -> None:
    outcome = run.run("t.boom", message="the end é", depth=200)
    assert outcome.error is not None and len(outcome.error.encode()) <= ERROR_BYTES
    assert outcome.error.rstrip().endswith("ValueError: the end é")


def test_reject_is_flagged_and_says_why(run: Runner) -> None:
    outcome = run.run("t.reject", reason="bad input file")
    assert outcome.reject and not outcome.ok
    assert outcome.error is not None and outcome.error.endswith("Reject: bad input file")


def test_sys_exit_in_a_handler_fails_only_the_attempt(run: Runner) -> None:
    pid = pid_of(run.run("t.echo"))
    outcome = run.run("t.sys_exit", status=3)
    assert not outcome.ok and "SystemExit: 3" in (outcome.error or "")
    assert pid_of(run.run("t.echo")) == pid


@pytest.mark.parametrize(
    ("task", "args", "error"),
    [
        ("t.exit", {"status": 3}, "child exited with status 3"),
        ("t.sigkill_self", {}, "child killed by SIGKILL"),
        ("t.segfault", {}, "child killed by SIGSEGV"),
    ],
)
def test_a_dying_child_is_a_failed_outcome_and_the_next_attempt_gets_a_new_one(
    run: Runner, task: str, args: dict[str, Any], error: str
) -> None:
    before = pid_of(run.run("t.echo"))
    assert run.run(task, **args) == Outcome(ok=False, value=None, error=error, reject=False)
    assert run.child.pid is None and gone(before)
    after = run.run("t.echo")
    assert after.ok and pid_of(after) != before


def test_segfault_leaves_a_python_stack_in_the_log(run: Runner) -> None:
    run.run("t.segfault")
    assert "Segmentation fault" in run.log() and "child_tasks.py" in run.log()


def test_timeout_kills_the_child_and_the_next_attempt_runs_on_a_fresh_one(run: Runner, tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    run.child.begin(run.request("t.sleep", timeout=0.5, seconds=60, pidfile=str(pidfile)))
    assert run.child.poll(0) is None
    started = time.monotonic()
    outcome = run.wait()
    assert time.monotonic() - started < 30  # far below the 60 s the handler asked for
    assert outcome == Outcome(ok=False, value=None, error="timed out after 0.5s", reject=False)
    old = read_pid(pidfile)
    assert old is not None and gone(old) and run.child.pid is None
    after = run.run("t.echo")
    assert after.ok and pid_of(after) != old


def test_end_if_overdue_kills_at_the_timeout_without_a_poll_and_the_next_poll_says_so(
    run: Runner, tmp_path: Path
) -> None:
    """A worker that can't poll (its save waits for room on a full disk) still ends an attempt at
    its timeout: nothing happens before it, the kill at it, the timeout is the next poll's outcome."""
    pidfile = tmp_path / "pid"
    run.child.begin(run.request("t.sleep", timeout=0.5, seconds=60, pidfile=str(pidfile)))
    wait_until(lambda: read_pid(pidfile) is not None)
    handler = read_pid(pidfile)
    assert handler is not None and 0 < run.child.seconds_left() <= 0.5
    run.child.end_if_overdue()  # not yet due: nothing happens
    assert not gone(handler)
    wait_until(lambda: run.child.seconds_left() <= 0)
    run.child.end_if_overdue()
    assert gone(handler) and run.child.seconds_left() == math.inf
    assert run.current_log is not None
    with pytest.raises(RuntimeError):  # the timeout is not taken yet
        run.child.begin(AttemptRequest("job-2", 9, "t.echo", {}, 30.0, 2, run.current_log))
    assert run.wait() == Outcome(ok=False, value=None, error="timed out after 0.5s", reject=False)
    assert run.run("t.echo").ok


def test_a_slow_import_costs_the_start_not_the_attempt(make_child: Callable[..., Child], tmp_path: Path) -> None:
    (tmp_path / "slow_tasks.py").write_text("import time\ntime.sleep(1.0)\n")
    child = make_child(import_modules=["child_tasks", "slow_tasks"], sys_path=[HERE, tmp_path])
    assert Runner(child, tmp_path).run("t.echo", timeout=0.5).ok


def test_a_hanging_import_hits_the_start_timeout(make_child: Callable[..., Child], tmp_path: Path) -> None:
    (tmp_path / "hung_tasks.py").write_text("import time\ntime.sleep(600)\n")
    child = make_child(import_modules=["hung_tasks"], sys_path=[tmp_path], start_timeout_seconds=1)
    outcome = Runner(child, tmp_path).run("t.echo")
    assert outcome.error == "child did not start within 1s (importing hung_tasks)"
    assert child.pid is None


def test_an_import_error_fails_every_attempt_naming_the_module(
    make_child: Callable[..., Child], tmp_path: Path
) -> None:
    runner = Runner(make_child(import_modules=["no_such_tasks_module"]), tmp_path)
    for _ in range(2):
        outcome = runner.run("wordcount", path="/dev/null")
        assert outcome.error == (
            "cannot import task module 'no_such_tasks_module': "
            "ModuleNotFoundError: No module named 'no_such_tasks_module'"
        )


def test_unknown_task(run: Runner) -> None:
    assert run.run("t.nope").error == "no handler registered for task 't.nope'"


def test_kill_takes_a_python_handlers_grandchild_too(run: Runner, tmp_path: Path) -> None:
    pidfile = tmp_path / "grandchild"
    run.child.begin(run.request("t.sleeper_grandchild", pidfile=str(pidfile)))
    wait_until(lambda: run.child.poll(0.01) is None and read_pid(pidfile))
    grandchild = read_pid(pidfile)
    assert grandchild is not None and not gone(grandchild)
    run.child.kill()
    wait_until(lambda: gone(grandchild))
    assert run.child.pid is None


def test_kill_takes_a_shell_jobs_process_too(run: Runner, tmp_path: Path) -> None:
    pidfile = tmp_path / "sleep.pid"
    script = f"echo $$ > {pidfile}.tmp && mv {pidfile}.tmp {pidfile} && exec sleep 1000"
    run.child.begin(run.request("shell", argv=["sh", "-c", script]))
    wait_until(lambda: run.child.poll(0.01) is None and read_pid(pidfile))
    sleeper = read_pid(pidfile)
    assert sleeper is not None and not gone(sleeper)
    run.child.kill()
    wait_until(lambda: gone(sleeper))


def test_shell_is_refused_without_allow_shell(make_child: Callable[..., Child], tmp_path: Path) -> None:
    outcome = Runner(make_child(allow_shell=False), tmp_path).run("shell", argv=["true"])
    assert outcome.error == "shell jobs need a worker started with --allow-shell"


def test_shell_ok_failed_and_malformed(run: Runner) -> None:
    script = 'echo "id=$SPOOL_JOB_ID attempt=$SPOOL_ATTEMPT"; echo oops >&2'
    ok = run.run("shell", argv=["sh", "-c", script])
    assert ok.value == {"exit": 0, "output": "id=job-1 attempt=1\noops\n"}
    assert run.log() == "id=job-1 attempt=1\noops\n"
    failed = run.run("shell", argv=["sh", "-c", "head -c 9000 /dev/zero | tr '\\0' x; exit 7"])
    assert failed.error is not None and failed.error.startswith("exit status 7: xxx")
    assert len(failed.error.encode()) == ERROR_BYTES
    missing = run.run("shell", argv=["/no/such/program"])
    assert missing.error == "cannot run '/no/such/program': No such file or directory"
    bad_args: list[dict[str, Any]] = [
        {"argv": []},
        {"argv": "ls"},
        {"argv": ["ls", 1]},
        {"argv": ["ls"], "cwd": "/"},
    ]
    for bad in bad_args:
        assert "shell jobs take args" in (run.run("shell", **bad).error or "")


def test_result_too_big_or_not_json(make_child: Callable[..., Child], tmp_path: Path) -> None:
    runner = Runner(make_child(max_result_bytes=100), tmp_path)
    assert runner.run("t.value", kind="big", size=98).value == "x" * 98  # 100 bytes with quotes
    big = runner.run("t.value", kind="big", size=2000)
    assert big.error == "result is 2002 bytes, over max_result_bytes 100"
    for kind in ("set", "nan"):
        error = runner.run("t.value", kind=kind).error or ""
        assert error.startswith("result is not JSON-serialisable: ")


def test_prints_land_in_the_log_not_the_protocol(run: Runner) -> None:
    assert run.run("t.print", marker="m1").value == "printed"
    log = run.log()
    for line in ('"value": "forged"', "stdout m1", "stderr m1", "raw fd1 m1", "unflushed tail"):
        assert line in log
    assert run.run("t.echo").ok  # and nothing of it leaked into the next reply


def test_log_is_private_and_never_followed(run: Runner, tmp_path: Path) -> None:
    run.run("t.print", marker="m")  # the log is created by the first output (an echo prints nothing)
    assert (tmp_path / "attempt-1.log").stat().st_mode & 0o777 == 0o600
    target = tmp_path / "elsewhere"
    (tmp_path / "attempt-2.log").symlink_to(target)
    # The worker opens the log (relative to logs/); a planted symlink is refused, never followed.
    with pytest.raises(OSError, match="symbolic links"):
        run.request("t.echo")
    assert not target.exists()


def test_an_attempt_that_prints_nothing_creates_no_log_file(run: Runner, tmp_path: Path) -> None:
    assert run.run("t.echo").ok
    assert not (tmp_path / "attempt-1.log").exists()
    run.run("t.print", marker="m")
    assert "stdout m" in run.log()


def test_handlers_see_the_workers_own_pythonpath(
    make_child: Callable[..., Child], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for pythonpath in (None, "/somewhere/else"):
        if pythonpath is None:
            monkeypatch.delenv("PYTHONPATH", raising=False)
        else:
            monkeypatch.setenv("PYTHONPATH", pythonpath)
        runner = Runner(make_child(), tmp_path)
        assert runner.run("t.environ", name="PYTHONPATH").value == pythonpath


def test_an_undecodable_name_in_an_error_is_made_utf8(run: Runner) -> None:
    error = run.run("t.boom", message="bad \udcff name").error or ""
    assert error.rstrip().endswith("ValueError: bad ? name")


def test_current_inside_a_handler(run: Runner) -> None:
    before = time.time()
    run.child.begin(AttemptRequest("job-7", 4, "t.current", {}, 30.0, 2, run.request("t.current").log))
    outcome = run.wait()
    after = time.time()
    value = outcome.value
    assert isinstance(value, dict)
    assert (value["job_id"], value["attempt"], value["tries_left"]) == ("job-7", 4, 2)
    # A wall-clock time (what current().deadline promises): the attempt's timeout from when it was sent, on time.time().
    assert before + 30.0 - 1 <= value["deadline"] <= after + 30.0 + 1


def test_begin_twice_and_poll_without_an_attempt_are_errors(run: Runner) -> None:
    with pytest.raises(RuntimeError):
        run.child.poll(0)
    run.child.begin(run.request("t.sleep", seconds=0.01))
    with pytest.raises(RuntimeError):
        run.child.begin(run.request("t.echo"))
    assert run.wait().value == "slept"


def test_args_that_are_not_json_change_nothing(run: Runner) -> None:
    with pytest.raises(TypeError):
        run.child.begin(run.request("t.echo", bad={1, 2}))
    assert run.run("t.echo").ok


def test_an_idle_child_that_died_is_replaced_transparently(run: Runner) -> None:
    pid = pid_of(run.run("t.echo"))
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: gone(pid))
    outcome = run.run("t.echo")
    assert outcome.ok and pid_of(outcome) != pid


def test_recycled_after_max_attempts(make_child: Callable[..., Child], tmp_path: Path) -> None:
    runner = Runner(make_child(max_attempts_per_child=2), tmp_path)
    pids = [pid_of(runner.run("t.echo")) for _ in range(4)]
    assert pids[0] == pids[1] != pids[2] == pids[3]
    wait_until(lambda: gone(pids[0]))


def test_close_lets_an_idle_child_exit(run: Runner) -> None:
    pid = pid_of(run.run("t.echo"))
    run.child.close()
    assert run.child.pid is None and gone(pid)
    run.child.close()  # idempotent


PARENT = """
import sys
from spool.runner.attempt.child import AttemptRequest, Child
child = Child(import_modules=["child_tasks"], allow_shell=True, max_result_bytes=1 << 20,
              sys_path=[{here!r}])
class Log:
    def write(self, data):
        pass
child.begin(AttemptRequest("job-1", 1, {task!r}, {args!r}, 600.0, 0, Log()))
with open({childfile!r} + ".tmp", "w") as f:
    f.write(str(child.pid))
import os
os.rename({childfile!r} + ".tmp", {childfile!r})
while child.poll(1.0) is None:
    pass
"""


@pytest.mark.parametrize("shell", [False, True], ids=["handler", "shell"])
def test_killing_the_parent_kills_the_child(tmp_path: Path, shell: bool) -> None:
    childfile, workfile = tmp_path / "child.pid", tmp_path / "work.pid"
    args: dict[str, Any]
    if shell:
        script = f"echo $$ > {workfile}.tmp && mv {workfile}.tmp {workfile} && exec sleep 1000"
        task, args = "shell", {"argv": ["sh", "-c", script]}
    else:
        task, args = "t.sleep", {"seconds": 1000, "pidfile": str(workfile)}
    code = PARENT.format(here=str(HERE), task=task, args=args, log=str(tmp_path / "a.log"), childfile=str(childfile))
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    parent = subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], env=env)
    try:
        wait_until(lambda: (read_pid(childfile) and read_pid(workfile)) or parent.poll() is not None)
        assert parent.poll() is None, "the parent process died early"
        child, work = read_pid(childfile), read_pid(workfile)
        assert child is not None and work is not None and not gone(child) and not gone(work)
        parent.kill()
        parent.wait()
        wait_until(lambda: gone(child) and gone(work))
    finally:
        parent.kill()
        parent.wait()
