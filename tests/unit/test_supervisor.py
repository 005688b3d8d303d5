"""runner/supervisor.py with real processes: restarts, backoff, give-up, graceful and hard stops.

The Supervisor runs in a driver subprocess (so tests can send it real signals); its children are
a small script that records each start and each SIGTERM as a file, then sleeps. Both are loaded
by path, so these tests do not depend on the rest of ``spool`` importing.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SUPERVISOR_PY = ROOT / "runner" / "supervisor.py"
LIFELINE_PY = ROOT / "runner" / "lifeline.py"

DRIVER = """
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("supervisor_under_test", sys.argv[1])
mod = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = mod  # dataclasses look their module up here
spec.loader.exec_module(mod)
config = json.loads(open(sys.argv[2]).read())
specs = [mod.ChildSpec(c["name"], c["argv"], c["env"]) for c in config["specs"]]
sys.exit(mod.Supervisor(specs, grace_seconds=config["grace_seconds"]).run())
"""

# argv: lifeline.py, out dir, name, mode. Records a start only once its signal setup is done.
CHILD = """
import importlib.util, json, os, signal, sys, time
lifeline_py, out, name, mode = sys.argv[1:5]
if mode in ("exit2", "exit75"):
    print(f"{name}: boom", file=sys.stderr, flush=True)
    sys.exit(int(mode[4:]))
spec = importlib.util.spec_from_file_location("lifeline", lifeline_py)
lifeline = importlib.util.module_from_spec(spec)
spec.loader.exec_module(lifeline)
lifeline.die_with_parent(int(os.environ["SPOOL_PARENT_PID"]))
def on_term(signum, frame):
    with open(os.path.join(out, name + ".terms"), "a") as f:
        f.write(f"{os.getpid()}\\n")
    sys.exit(0)
signal.signal(signal.SIGTERM, signal.SIG_IGN if mode == "ignore-term" else on_term)
record = {"pid": os.getpid(), "crash_at": os.environ.get("SPOOL_CRASH_AT"),
          "parent": os.environ.get("SPOOL_PARENT_PID")}
with open(os.path.join(out, name + ".starts"), "a") as f:
    f.write(json.dumps(record) + "\\n")
while True:
    time.sleep(3600)
"""


def wait_until(condition: Callable[[], object], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.01)


def alive(pid: int) -> bool:
    """True unless gone or a zombie (a reparented zombie may linger if nobody reaps it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


class Run:
    """One driver process and the files its children leave in ``out``."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.out = tmp_path / "out"
        self.out.mkdir()
        self.log_path = tmp_path / "supervisor.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, children: dict[str, str], *, grace_seconds: float, env: dict[str, str] | None = None) -> None:
        (self.tmp_path / "driver.py").write_text(DRIVER)
        (self.tmp_path / "child.py").write_text(CHILD)
        base = {k: v for k, v in os.environ.items() if not k.startswith("SPOOL_")}
        child_py = str(self.tmp_path / "child.py")
        specs = [
            {
                "name": name,
                "argv": [sys.executable, child_py, str(LIFELINE_PY), str(self.out), name, mode],
                "env": {**base, **(env or {})},
            }
            for name, mode in children.items()
        ]
        config = self.tmp_path / "config.json"
        config.write_text(json.dumps({"specs": specs, "grace_seconds": grace_seconds}))
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, str(self.tmp_path / "driver.py"), str(SUPERVISOR_PY), str(config)],
                stdout=log,
                stderr=log,
            )

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def log(self) -> str:
        return self.log_path.read_text()

    def starts(self, name: str) -> list[dict[str, object]]:
        path = self.out / f"{name}.starts"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]

    def pids(self, name: str) -> list[int]:
        return [int(s["pid"]) for s in self.starts(name)]  # type: ignore[call-overload]

    def all_child_pids(self) -> list[int]:
        return [pid for path in self.out.glob("*.starts") for pid in self.pids(path.stem)]

    def wait_started(self, name: str, count: int = 1, timeout: float = 5.0) -> None:
        wait_until(lambda: len(self.starts(name)) >= count, timeout, f"{name} start #{count}")

    def wait_exit(self, timeout: float) -> int:
        assert self.proc is not None
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"supervisor still running after {timeout} s; log:\n{self.log()}") from None

    def kill_everything(self) -> None:
        """Teardown: kill, by pid, the driver and every child it recorded."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
        if self.proc is not None:
            self.proc.wait()
        for pid in self.all_child_pids():
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.fixture
def run(tmp_path: Path) -> Iterator[Run]:
    r = Run(tmp_path)
    yield r
    r.kill_everything()


def test_killed_child_is_restarted_alone_with_growing_delay(run: Run) -> None:
    run.start({"w": "term-ok", "other": "term-ok"}, grace_seconds=1.0)
    run.wait_started("w")
    run.wait_started("other")
    gaps = []
    for n in range(1, 4):
        killed_at = time.monotonic()
        os.kill(run.pids("w")[-1], signal.SIGKILL)
        run.wait_started("w", n + 1)
        gaps.append(time.monotonic() - killed_at)
    delays = [float(d) for d in re.findall(r"restart w in ([\d.]+) s", run.log())]
    assert delays == [0.1, 0.2, 0.4]
    assert all(gap >= delay for gap, delay in zip(gaps, delays)), (gaps, delays)
    assert len(set(run.pids("w"))) == 4
    assert len(run.starts("other")) == 1  # the one that did not die was left alone
    assert "signal SIGKILL" in run.log()
    os.kill(run.pid, signal.SIGTERM)
    assert run.wait_exit(5) == 0


def test_quick_error_exits_five_times_give_up_with_exit_1(run: Run) -> None:
    started = time.monotonic()
    run.start({"bad": "exit2", "good": "term-ok"}, grace_seconds=1.0)
    assert run.wait_exit(10) == 1
    assert time.monotonic() - started < 5
    log = run.log()
    assert "give up: bad exited with exit status 2 within 1 s of starting, 5 times in a row" in log
    assert log.count("bad: boom") == 5  # stderr passes through
    assert len(run.starts("good")) == 1
    assert (run.out / "good.terms").exists()  # the others were stopped with SIGTERM
    assert not any(alive(pid) for pid in run.all_child_pids())


def test_exit_75_is_try_later_restarted_with_backoff_and_never_given_up(run: Run) -> None:
    """Issue 17, finding 5: a full disk (exit 75) passes by itself; giving up on it stopped the
    workers holding finished attempts."""
    run.start({"full": "exit75", "good": "term-ok"}, grace_seconds=1.0)
    wait_until(lambda: run.log().count("exit full pid=") >= 6, 15, "six quick exits 75, one past the give-up")
    assert run.proc is not None and run.proc.poll() is None, run.log()
    assert "give up" not in run.log()
    delays = [float(d) for d in re.findall(r"restart full in ([\d.]+) s", run.log())]
    assert delays[:5] == [0.1, 0.2, 0.4, 0.8, 1.6]
    assert len(run.starts("good")) == 1
    os.kill(run.pid, signal.SIGTERM)
    assert run.wait_exit(5) == 0


def test_crash_env_only_on_first_start_and_parent_pid_set(run: Run) -> None:
    run.start({"w": "term-ok"}, grace_seconds=1.0, env={"SPOOL_CRASH_AT": "claim.after_link"})
    run.wait_started("w")
    os.kill(run.pids("w")[0], signal.SIGKILL)
    run.wait_started("w", 2)
    first, second = run.starts("w")
    assert first["crash_at"] == "claim.after_link"
    assert second["crash_at"] is None
    assert first["parent"] == second["parent"] == str(run.pid)
    os.kill(run.pid, signal.SIGTERM)
    assert run.wait_exit(5) == 0


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_first_signal_forwards_sigterm_and_exits_0(run: Run, signum: int) -> None:
    run.start({"coordinator": "term-ok", "worker-1": "term-ok"}, grace_seconds=1.0)
    run.wait_started("coordinator")
    run.wait_started("worker-1")
    os.kill(run.pid, signum)
    assert run.wait_exit(5) == 0
    for name in ("coordinator", "worker-1"):
        assert (run.out / f"{name}.terms").read_text().split() == [str(run.pids(name)[0])]
        assert len(run.starts(name)) == 1  # nothing restarted during the stop
    assert "restart" not in run.log()
    assert "kill " not in run.log()


def test_child_ignoring_sigterm_is_killed_after_grace(run: Run) -> None:
    run.start({"stubborn": "ignore-term", "polite": "term-ok"}, grace_seconds=0.5)
    run.wait_started("stubborn")
    run.wait_started("polite")
    stubborn = run.pids("stubborn")[0]
    signalled = time.monotonic()
    os.kill(run.pid, signal.SIGTERM)
    assert run.wait_exit(10) == 0
    waited = time.monotonic() - signalled
    assert 5.5 <= waited < 7.5, waited  # grace_seconds + 5, then SIGKILL
    assert not alive(stubborn)
    assert f"kill stubborn pid={stubborn}" in run.log()
    assert (run.out / "polite.terms").exists()


def test_second_signal_kills_at_once(run: Run) -> None:
    run.start({"stubborn": "ignore-term"}, grace_seconds=30)
    run.wait_started("stubborn")
    stubborn = run.pids("stubborn")[0]
    os.kill(run.pid, signal.SIGTERM)
    wait_until(lambda: "stop: SIGTERM" in run.log(), 5, "the graceful stop to begin")
    assert alive(stubborn)
    signalled = time.monotonic()
    os.kill(run.pid, signal.SIGINT)
    assert run.wait_exit(5) == 0
    assert time.monotonic() - signalled < 1.5
    assert not alive(stubborn)
    assert "stop now: second signal" in run.log()


def test_children_die_with_a_killed_supervisor(run: Run) -> None:
    run.start({"coordinator": "term-ok", "worker-1": "ignore-term"}, grace_seconds=1.0)
    run.wait_started("coordinator")
    run.wait_started("worker-1")
    pids = run.all_child_pids()
    assert len(pids) == 2 and all(alive(pid) for pid in pids)
    os.kill(run.pid, signal.SIGKILL)
    run.wait_exit(5)
    wait_until(lambda: not any(alive(p) for p in pids), 5, "children to die with the supervisor")
