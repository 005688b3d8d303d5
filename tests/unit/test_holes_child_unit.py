"""Issue 7, in-process pieces of the attempt child's fixes: capped logs and their reader, the
hidden channel, garbled replies, a shell job's output, ``current().seconds_left()``.

Children are real processes (killed at teardown); the filesystem and clocks are the real ones.
"""

from __future__ import annotations

import os
import random
import resource
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spool.attemptlog import AttemptLog, LogReader, marker
from spool.registry import Current
from spool.runner.attempt.child import AttemptRequest, Child, Outcome
from spool.settings import load_settings

TASKS = """
import os
import time

from spool import task

if os.environ.get("HOLES_PRINT_AT_IMPORT"):
    print("hello from the import", flush=True)
    os.write(2, b"and its stderr\\n")

if os.environ.get("HOLES_GARBLE_AT_IMPORT"):
    for name in os.listdir("/proc/self/fd"):
        try:
            if int(name) > 2 and os.readlink(f"/proc/self/fd/{name}").startswith("pipe:"):
                os.write(int(name), b"noise\\n")
        except OSError:
            pass


@task("u.garble")
def garble(payload):
    for name in os.listdir("/proc/self/fd"):
        try:
            if int(name) > 2 and os.readlink(f"/proc/self/fd/{name}").startswith("pipe:"):
                os.write(int(name), payload.encode())
        except OSError:
            pass
    return "ok"


@task("u.fds")
def fds():
    return sorted(int(name) for name in os.listdir("/proc/self/fd"))


@task("u.print_then_hang")
def print_then_hang(text):
    print(text, flush=True)
    time.sleep(600)
"""


@pytest.fixture
def folder(tmp_path: Path) -> Iterator[int]:
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    yield fd
    os.close(fd)


# -- AttemptLog and LogReader -----------------------------------------------------------------


def test_a_log_over_its_cap_keeps_the_tail_behind_a_marker(tmp_path: Path, folder: int) -> None:
    log = AttemptLog(folder, folder, "a.log", 1000)
    stream = b""
    rng = random.Random(7)
    for n in range(300):
        data = bytes([65 + n % 26]) * rng.randrange(1, 1500)
        stream += data
        log.write(data)
        assert (tmp_path / "a.log").stat().st_size <= 2000 + 100, "never more than twice the cap"
    log.close()
    assert (tmp_path / "a.log").read_bytes() == marker(len(stream) - 1000, 1000) + stream[-1000:]
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")], "no staging file left"


def test_a_log_under_its_cap_is_kept_whole_without_a_marker(tmp_path: Path, folder: int) -> None:
    log = AttemptLog(folder, folder, "a.log", 1000)
    for _ in range(10):
        log.write(b"x" * 100)
    log.close()
    log.close()
    assert (tmp_path / "a.log").read_bytes() == b"x" * 1000


def test_a_reader_that_keeps_up_sees_the_whole_stream_across_trims(folder: int) -> None:
    log = AttemptLog(folder, folder, "a.log", 500)
    reader = LogReader(folder, "a.log")
    rng = random.Random(3)
    stream, shown = b"", b""
    for _ in range(200):
        data = os.urandom(rng.randrange(1, 400))
        stream += data
        log.write(data)
        shown += b"".join(reader.chunks())
    log.close()
    shown += b"".join(reader.chunks())
    reader.close()
    # The final trim at close cut nothing the reader had not shown already.
    assert shown == stream


def test_a_reader_that_falls_behind_is_told_what_was_cut(folder: int) -> None:
    log = AttemptLog(folder, folder, "a.log", 100)
    reader = LogReader(folder, "a.log")
    log.write(b"a" * 50)
    assert b"".join(reader.chunks()) == b"a" * 50
    log.write(b"b" * 1000)  # trimmed at once: 950 b's cut before the reader saw them
    log.close()
    assert b"".join(reader.chunks()) == marker(950, 100) + b"b" * 100
    reader.close()


def test_a_log_is_opened_only_as_a_regular_file(tmp_path: Path, folder: int) -> None:
    (tmp_path / "link.log").symlink_to(tmp_path / "elsewhere")
    os.mkfifo(tmp_path / "fifo.log")
    (tmp_path / "dir.log").mkdir()
    for name in ("link.log", "fifo.log", "dir.log"):
        with pytest.raises(OSError):
            AttemptLog(folder, folder, name, 1000)
    assert not (tmp_path / "elsewhere").exists()


# -- the child: channel, garbage, output ------------------------------------------------------


@pytest.fixture
def child(tmp_path: Path) -> Iterator[Child]:
    (tmp_path / "holes_unit_tasks.py").write_text(TASKS, encoding="utf-8")
    made = Child(
        import_modules=["holes_unit_tasks"], allow_shell=True, max_result_bytes=1 << 20, sys_path=[str(tmp_path)]
    )
    yield made
    made.kill()


def run(child: Child, log: AttemptLog, task: str, timeout: float = 60.0, **args: Any) -> Outcome:
    child.begin(AttemptRequest("job-1", 1, task, args, timeout, 0, log))
    deadline = time.monotonic() + 60
    while (outcome := child.poll(0.05)) is None:
        assert time.monotonic() < deadline, "no outcome in time"
    log.close()
    return outcome


def test_the_channel_sits_far_above_the_fds_a_handler_opens(child: Child, folder: int) -> None:
    fds = run(child, AttemptLog(folder, folder, "a.log", 1000), "u.fds").value
    assert isinstance(fds, list)
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    top = min(4096 if soft == resource.RLIM_INFINITY else soft, 4096) - 64  # where the child puts them
    high = [fd for fd in fds if fd >= top]
    assert len(high) == 2, f"the request and reply pipes are the only fds from {top} up: {fds}"
    assert max(fd for fd in fds if fd < top) < 32, f"the handler's own fds stay low: {fds}"


def test_a_shell_job_inherits_only_stdin_stdout_and_stderr(child: Child, folder: int) -> None:
    outcome = run(child, AttemptLog(folder, folder, "a.log", 1000), "shell", argv=["ls", "/proc/self/fd"])
    assert outcome.ok and isinstance(outcome.value, dict)
    assert outcome.value["output"].split() == ["0", "1", "2", "3"]  # 3: ls reading the folder


def test_garbage_that_reaches_the_reply_channel_fails_the_attempt_and_replaces_the_child(
    child: Child, folder: int
) -> None:
    first = run(child, AttemptLog(folder, folder, "1.log", 1000), "u.fds")
    pid = child.pid
    forged = '{"seq": 1, "ok": true, "value": "forged", "error": null, "reject": false}\n'
    for payload in ("not json\n", '{"hello": true}\n', "no newline at all", forged):
        outcome = run(child, AttemptLog(folder, folder, "2.log", 1000), "u.garble", payload=payload)
        assert not outcome.ok and "the attempt's reply was garbled" in (outcome.error or ""), outcome
        assert child.pid is None, "the child was killed"
    again = run(child, AttemptLog(folder, folder, "3.log", 1000), "u.fds")
    assert first.ok and again.ok and child.pid != pid


def test_garbage_before_the_hello_fails_the_attempt(child: Child, folder: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOLES_GARBLE_AT_IMPORT", "1")
    outcome = run(child, AttemptLog(folder, folder, "a.log", 1000), "u.fds")
    assert not outcome.ok and "hello was garbled" in (outcome.error or ""), outcome


def test_what_a_task_module_prints_at_import_goes_to_the_workers_stderr_not_the_log(
    child: Child, tmp_path: Path, folder: int, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("HOLES_PRINT_AT_IMPORT", "1")
    assert run(child, AttemptLog(folder, folder, "a.log", 1000), "shell", argv=["echo", "the job"]).ok
    assert (tmp_path / "a.log").read_text() == "the job\n"
    # stdout at import is /dev/null (as between attempts); stderr is the worker's.
    assert capfd.readouterr().err == "and its stderr\n"


def test_a_killed_attempts_output_reaches_its_log(child: Child, tmp_path: Path, folder: int) -> None:
    outcome = run(child, AttemptLog(folder, folder, "a.log", 1000), "u.print_then_hang", timeout=2.0, text="last words")
    assert outcome.error == "timed out after 2s"
    assert (tmp_path / "a.log").read_text() == "last words\n"


def test_a_shell_job_that_leaves_a_process_behind_still_ends_with_its_output(
    child: Child, tmp_path: Path, folder: int
) -> None:
    started = time.monotonic()
    outcome = run(
        child, AttemptLog(folder, folder, "a.log", 1000), "shell", argv=["sh", "-c", "sleep 300 & echo started it"]
    )
    assert outcome.value == {"exit": 0, "output": "started it\n"}
    assert time.monotonic() - started < 60
    assert (tmp_path / "a.log").read_text() == "started it\n"


# -- current(), settings ----------------------------------------------------------------------


def test_seconds_left_counts_on_the_monotonic_clock_not_the_wall_clock() -> None:
    # A wall-clock deadline long past (as after the clock stepped forward) changes nothing.
    me = Current("j", 1, 0, deadline=time.time() - 1000, monotonic_deadline=time.monotonic() + 50)
    assert 45 < me.seconds_left() <= 50
    assert Current("j", 1, 0, deadline=time.time() + 30).seconds_left() > 25  # no monotonic: the wall


def test_max_log_bytes_is_a_setting_like_the_others() -> None:
    assert load_settings(None, {}, {}).max_log_bytes == 1 << 20
    got = load_settings(None, {"SPOOL_MAX_LOG_BYTES": "64KiB"}, {})
    assert (got.max_log_bytes, got.sources["max_log_bytes"]) == (65536, "env SPOOL_MAX_LOG_BYTES")
