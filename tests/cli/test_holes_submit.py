"""Issue 7, findings 1, 11 and 15 (the command line): every way in refuses what it cannot keep.

- Finding 1: a job over ``max_job_bytes`` is refused by every way in (``-a``, ``--args-json``,
  ``-f``, the Python API) before anything is written; what the runner adds to a job file is
  bounded, so a job that fails 200 times still reads back and ends dead with its last error, and
  lowering ``max_job_bytes`` later never makes an accepted job unreadable.
- Finding 11: bad delays, sizes, tries, API arguments: one clear line and exit 2, never a
  traceback; unknown ``SPOOL_*`` names and crash points are warned about with a suggestion.
- Finding 15: ``init --json``, errors as JSON under ``--json``, ``ls --limit 0``, and the human
  ``status`` showing priority, not_before and depends_on.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from support import Procs, run_spool, wait_until

from spool import Spool
from spool.base.errors import InvalidJob
from spool.disk.layout import State

Run = Callable[..., subprocess.CompletedProcess[str]]
BIG = "x" * 100_000  # two of these: a 200 kB job against the 64 KiB default


def written(root: Path) -> dict[str, list[str]]:
    """Everything a submit could have left: job files, staged files, key reservations."""
    return {
        folder: sorted(os.listdir(root / folder))
        for folder in ("pending", "waiting", "leased", "done", "dead", "tmp", "keys")
    }


def one_clear_line(proc: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("spool: "), proc.stderr
    return proc.stderr


# -- finding 1: the size cap, at every way in ---------------------------------------------------------


@pytest.mark.parametrize("way", ["-a", "--args-json", "-f"])
def test_a_job_over_max_job_bytes_is_refused_by_the_cli_before_anything_is_written(
    spool_cli: Run, spool_dir: Path, tmp_path: Path, way: str
) -> None:
    before = written(spool_dir)
    if way == "-a":
        proc = spool_cli("submit", "echo", "--key", "big", "-a", f"a={BIG}", "-a", f"b={BIG}")
    elif way == "--args-json":  # one argv word: under the kernel's 128 KiB per-word limit
        proc = spool_cli("submit", "echo", "--key", "big", "--args-json", json.dumps({"a": BIG[:50_000] * 2}))
    else:
        # Under the limit as a file, over it once the runner writes it (a long key per line).
        path = tmp_path / "job.yaml"
        path.write_text(
            "task: echo\nkey: big\nargs:\n" + "".join(f"  a{i}: [{', '.join(['1'] * 100)}]\n" for i in range(40))
        )
        proc = spool_cli("--max-job-bytes", "20KiB", "submit", "-f", str(path))
    assert proc.returncode == 2 and proc.stdout == "", proc
    line = one_clear_line(proc)
    assert "bytes as YAML, over max_job_bytes" in line and "nothing was written" in line, line
    if way == "-f":  # under the limit as a file: it took the exact measure, not the quick lower bound
        assert "at least" not in line, line
    assert written(spool_dir) == before  # no job, no staged file, no key reservation


def test_the_refusal_names_the_size_and_the_limit(spool_cli: Run) -> None:
    proc = spool_cli("submit", "echo", "-a", f"a={BIG}", "-a", f"b={BIG}")
    line = one_clear_line(proc)
    size = int(line.split("job is at least ")[1].split(" bytes")[0].replace(",", ""))
    assert 200_000 < size < 201_000 and "max_job_bytes 65,536" in line, line


def test_a_job_over_max_job_bytes_is_refused_by_the_python_api(sp: Spool) -> None:
    before = written(sp.root)
    started = time.monotonic()
    with pytest.raises(InvalidJob, match=r"job is at least 20,000,00[0-9] bytes as YAML, over max_job_bytes 65,536"):
        sp.submit("echo", {"blob": "y" * 20_000_000}, key="huge")
    assert time.monotonic() - started < 5, "refused without encoding 20 MB as YAML (15 s)"
    with pytest.raises(InvalidJob, match="over max_job_bytes"):
        sp.submit_spec({"task": "echo", "args": {"a": BIG, "b": BIG}})
    assert written(sp.root) == before


def test_a_job_just_under_the_limit_is_accepted_and_kept_whole(sp: Spool) -> None:
    job_id = sp.submit("echo", {"blob": "z" * 60_000})
    state, job_file = sp.job(job_id)
    assert state is State.PENDING and job_file.job.args == {"blob": "z" * 60_000}


def test_lowering_max_job_bytes_later_keeps_accepted_jobs_readable(spool_dir: Path) -> None:
    with Spool(spool_dir, environ={}, flags={"max_job_bytes": "1MiB"}) as roomy:
        job_id = roomy.submit("echo", {"blob": "w" * 900_000})
    with Spool(spool_dir, environ={}) as strict:  # back to the 64 KiB default
        assert strict.status(job_id)["state"] == "pending"
        assert strict.job(job_id)[1].job.args == {"blob": "w" * 900_000}


FAILING_TASKS = '''
from spool import task


@task("fail_long")
def fail_long(lines=60):
    """Always fail with a long, many-line error (a traceback tail of 4 KiB per attempt)."""
    raise RuntimeError("\\n".join(f"context line {i}: " + "e" * 70 for i in range(lines)) + "\\nthe last line")
'''


def test_a_job_that_fails_200_times_stays_readable_and_ends_dead_with_its_last_error(
    spool_dir: Path, procs: Procs, tmp_path: Path
) -> None:
    modules = tmp_path / "modules"
    modules.mkdir()
    (modules / "holes_tasks.py").write_text(FAILING_TASKS)
    env = {"PYTHONPATH": os.pathsep.join([str(modules), os.environ["PYTHONPATH"]])}
    fast = ("--poll-seconds", "0.2", "--backoff-base-seconds", "0.001", "--backoff-max-seconds", "0.001")
    with Spool(spool_dir, environ={}) as sp:
        job_id = sp.submit("fail_long", max_tries=200)
        procs.start(*fast, "coordinator", env=env, name="coordinator")
        procs.start(*fast, "worker", "--import", "holes_tasks", env=env, name="worker")
        wait_until(lambda: sp.state(job_id) is State.DEAD, timeout=240, message="the job to be dead after 200 tries")
        state, job_file = sp.job(job_id)  # reads back: the runner's additions stay bounded
    assert (state, job_file.reason, job_file.tries, job_file.attempt) == (State.DEAD, "failed", 200, 200)
    assert job_file.error is not None and job_file.error.rstrip().endswith("the last line")
    last = job_file.attempts[-1]
    assert last.attempt == 200 and last.outcome == "failed" and last.error.rstrip().endswith("the last line")
    assert len(last.error.encode()) > 2000, "the last attempt keeps its error's whole 4 KiB tail"
    assert all(len(r.error.encode()) <= 200 for r in job_file.attempts[:-1]), "older errors: their last line"
    assert job_file.attempts_dropped + len(job_file.attempts) == 200
    assert [r.attempt for r in job_file.attempts] == list(range(201 - len(job_file.attempts), 201))
    status = run_spool("status", job_id, spool=spool_dir)
    assert status.returncode == 0 and "earlier attempt records not kept" in status.stdout, status


# -- finding 11: clear errors, never a traceback -----------------------------------------------------


@pytest.mark.parametrize("flag", ["--delay", "--timeout"])
def test_a_delay_or_timeout_too_far_away_is_one_line_and_exit_2(spool_cli: Run, spool_dir: Path, flag: str) -> None:
    before = written(spool_dir)
    proc = spool_cli("submit", "echo", flag, "99999999999d")
    assert proc.returncode == 2 and proc.stdout == "", proc
    line = one_clear_line(proc)
    assert flag in line and "too far" in line and "100 years" in line, line
    assert written(spool_dir) == before


def test_a_size_setting_too_big_names_its_variable(spool_cli: Run) -> None:
    proc = spool_cli("submit", "echo", env={"SPOOL_MAX_JOB_BYTES": "999999999999999gib"})
    assert proc.returncode == 2, proc
    line = one_clear_line(proc)
    assert "SPOOL_MAX_JOB_BYTES" in line and "too big" in line, line


def test_max_tries_out_of_the_job_range_is_refused_at_start_naming_its_source(spool_cli: Run) -> None:
    proc = spool_cli("config", env={"SPOOL_MAX_TRIES": "5000"})
    assert proc.returncode == 2, proc
    line = one_clear_line(proc)
    assert "env SPOOL_MAX_TRIES" in line and "1 to 1000" in line, line


@pytest.mark.parametrize("delay", [1e12, math.inf, -5.0, math.nan, "10"])
def test_the_api_refuses_a_bad_delay(sp: Spool, delay: object) -> None:
    with pytest.raises(InvalidJob, match="delay_seconds"):
        sp.submit("echo", delay_seconds=delay)  # type: ignore[arg-type]
    assert written(sp.root)["pending"] == []


def test_the_api_refuses_a_timeout_too_far_away(sp: Spool) -> None:
    with pytest.raises(InvalidJob, match="timeout"):
        sp.submit("echo", timeout=1e300)


def test_the_api_refuses_args_that_are_not_a_mapping(sp: Spool) -> None:
    with pytest.raises(InvalidJob, match="args must be a mapping"):
        sp.submit("echo", [1, 2])  # type: ignore[arg-type]


def test_the_api_refuses_depends_on_given_as_one_string(sp: Spool) -> None:
    parent = sp.submit("echo")
    with pytest.raises(InvalidJob, match="depends_on must be a list of ids"):
        sp.submit("echo", depends_on=parent)
    child = sp.submit("echo", depends_on=[parent])  # a list (or any iterable of ids) is fine
    assert sp.status(child)["depends_on"] == [parent]


def test_an_unknown_spool_variable_is_warned_about_with_a_suggestion(spool_cli: Run) -> None:
    proc = spool_cli("config", env={"SPOOL_LEASE_SECOND": "5"})
    assert proc.returncode == 0, proc
    assert proc.stderr == (
        "spool: warning: SPOOL_LEASE_SECOND is not a setting; did you mean SPOOL_LEASE_SECONDS?\n"
    ), proc.stderr


def test_names_spool_itself_uses_are_not_warned_about(spool_cli: Run, spool_dir: Path) -> None:
    env = {
        "SPOOL_DIR": str(spool_dir),
        "SPOOL_JOB_ID": "01ABC",
        "SPOOL_ATTEMPT": "1",
        "SPOOL_CHAOS_SEED": "7",
        "SPOOL_CRASH_AT": "worker:after-claim",
        "SPOOL_LEASE_SECONDS": "10",
    }
    proc = spool_cli("config", env=env)
    assert proc.returncode == 0 and proc.stderr == "", proc


def test_an_unknown_crash_point_is_warned_about_once(spool_cli: Run, spool_dir: Path) -> None:
    proc = spool_cli("submit", "echo", env={"SPOOL_CRASH_AT": "submit:after-comit"})
    assert proc.returncode == 0 and proc.stdout.strip(), proc
    assert proc.stderr == (
        "spool: warning: SPOOL_CRASH_AT=submit:after-comit is not a crash point; "
        "did you mean submit:after-commit? (see `spool crash-points`)\n"
    ), proc.stderr
    nope = spool_cli("submit", "echo", env={"SPOOL_CRASH_AT": "submit:nope"})
    assert nope.returncode == 0 and nope.stderr.count("\n") == 1, nope
    assert "submit:nope is not a crash point; submit has after-key-check" in nope.stderr, nope.stderr
    assert len([name for name in written(spool_dir)["pending"] if name.endswith(".yaml")]) == 2


# -- finding 15: the command line ------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["before", "after"])
def test_init_prints_one_json_document_under_json(tmp_path: Path, where: str) -> None:
    root = tmp_path / "fresh"

    def init() -> dict[str, object]:
        args = ("--json", "init") if where == "before" else ("init", "--json")
        proc = run_spool("--spool", str(root), *args)
        assert proc.returncode == 0 and proc.stderr == "", proc
        return json.loads(proc.stdout)

    assert init() == {"spool": str(root), "created": True}
    assert init() == {"spool": str(root), "created": False}


@pytest.mark.parametrize(
    "argv, code",
    [
        (("--json", "status", "01M8RAAAAAAAAAAAAAAAAAAAAA"), 3),
        (("status", "01M8RAAAAAAAAAAAAAAAAAAAAA", "--json"), 3),
        (("--json", "ls", "--limit", "-1"), 2),
        (("submit", "echo", "--json", "--delay", "99999999999d"), 2),
    ],
)
def test_errors_under_json_are_one_json_object_on_stderr(spool_cli: Run, argv: tuple[str, ...], code: int) -> None:
    proc = spool_cli(*argv)
    assert proc.returncode == code and proc.stdout == "", proc
    assert proc.stderr.count("\n") == 1, proc.stderr
    error = json.loads(proc.stderr)
    assert set(error) == {"error", "exit"} and error["exit"] == code and error["error"], error


def test_ls_limit_0_lists_nothing_and_a_negative_limit_is_refused(spool_cli: Run, sp: Spool) -> None:
    for _ in range(3):
        sp.submit("echo")
    zero = spool_cli("ls", "--limit", "0", "--json")
    assert zero.returncode == 0 and json.loads(zero.stdout) == [], zero
    assert len(json.loads(spool_cli("ls", "--limit", "2", "--json").stdout)) == 2
    negative = spool_cli("ls", "--limit", "-1")
    assert negative.returncode == 2 and "--limit" in one_clear_line(negative), negative


def test_ls_limit_0_lists_nothing_from_the_files_too(spool_cli: Run, spool_dir: Path) -> None:
    """Without a usable ledger `ls` lists the folders: the limit must hold there as well."""
    with Spool(spool_dir, environ={}) as own:
        for _ in range(3):
            own.submit("echo")
    for name in ("ledger.sqlite3", "ledger.sqlite3-wal", "ledger.sqlite3-shm"):
        (spool_dir / name).unlink(missing_ok=True)
    (spool_dir / "ledger.sqlite3").write_bytes(b"not a database" * 512)
    zero = spool_cli("ls", "--limit", "0", "--json")
    assert zero.returncode == 0 and json.loads(zero.stdout) == [], zero
    assert len(json.loads(spool_cli("ls", "--limit", "2", "--json").stdout)) == 2


def test_status_shows_priority_not_before_and_depends_on(spool_cli: Run, sp: Spool) -> None:
    parent = sp.submit("echo")
    child = sp.submit("echo", priority=5, delay_seconds=3600, depends_on=[parent])
    proc = spool_cli("status", child)
    assert proc.returncode == 0, proc
    lines = dict(line.split(":", 1) for line in proc.stdout.splitlines() if ":" in line)
    assert lines["priority"].strip() == "5"
    assert lines["not before"].strip() == sp.status(child)["not_before"]
    assert lines["depends on"].strip() == f"{parent} (pending)"
    plain = spool_cli("status", parent)
    assert "priority" not in plain.stdout and "depends on" not in plain.stdout, plain.stdout


def test_no_traceback_anywhere_above(spool_cli: Run) -> None:
    """A last sweep: odd inputs through a real process end in one line, never a traceback."""
    for argv, env in [
        (("submit", "echo", "--delay", "1e400"), {}),
        (("submit", "echo", "--timeout", "inf"), {}),
        (("config",), {"SPOOL_MAX_RESULT_BYTES": "99999999999999gib"}),
        (("config",), {"SPOOL_LEASE_SECONDS": "9999999999999999d"}),
    ]:
        proc = spool_cli(*argv, env=env)
        assert proc.returncode == 2, (argv, proc)
        one_clear_line(proc)
