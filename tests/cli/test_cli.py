"""The command line's contract (README.md, "Commands" and "EXIT STATUS"): words, JSON, exit codes, refusals.

Most calls run the real entry point in this process (``spool_in``, see conftest.py); a few run
``python -m spool.cli`` as a real process to show the same codes reach the shell.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from spool.cli.main import cli
from spool.disk.ids import new_id
from spool.disk.layout import State, key_name
from spool.spool import Spool
from spool.moves.store import read_job
from spool.moves.transitions import Lease, claim, complete, fail
from support import run_spool

Ran = Any  # conftest.Ran: code, out, err
Run = Callable[..., Ran]

STATUS_KEYS = {
    "id",
    "key",
    "task",
    "state",
    "reason",
    "attempt",
    "tries",
    "max_tries",
    "attempts",
    "lease",
    "error",
    "result",
}
ATTEMPT_KEYS = {"attempt", "worker", "started", "ended", "outcome", "error"}
LEASE_KEYS = {"worker", "attempt", "claimed_at"}


def one_line_error(ran: Ran, code: int, *words: str) -> None:
    assert ran.code == code, ran
    lines = ran.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("spool: "), ran.err
    for word in words:
        assert word in lines[0], (word, lines[0])


def job_files(root: Path) -> list[str]:
    return [n for state in State for n in os.listdir(root / state.value) if not n.startswith(".")]


def finished(sp: Spool, ok: bool, **kwargs: object) -> str:
    job_id = sp.submit("echo", **kwargs)  # type: ignore[arg-type]
    claimed = claim(sp, "w", None)
    assert claimed is not None and claimed.id == job_id
    lease = Lease(job_id, "w", claimed.attempt)
    complete(sp, lease, b'{"v": 1}') if ok else fail(sp, lease, "Traceback\nValueError: boom", reject=True)
    return job_id


# -- submit -------------------------------------------------------------------------------------


def test_submit_prints_only_the_id(spool_in: Run, sp: Spool) -> None:
    ran = spool_in("submit", "echo", "-a", "x=1")
    assert ran.code == 0 and ran.err == ""
    job_id = ran.out.strip()
    assert ran.out == job_id + "\n" and sp.state(job_id) is State.PENDING


def test_dash_a_splits_at_the_first_equals_and_colon_equals_is_json(spool_in: Run, sp: Spool) -> None:
    ran = spool_in(
        "submit",
        "echo",
        "-a",
        "url=a=b=c",
        "-a",
        "n:=5",
        "-a",
        'j:={"k": "v=w"}',
        "-a",
        's:="x=y"',
        "-a",
        "empty=",
        "-a",
        "flag:=true",
        "-a",
        "none:=null",
        "-a",
        "list:=[1, 2]",
    )
    assert ran.code == 0, ran
    args = read_job(sp, State.PENDING, ran.out.strip()).job.args
    assert args == {
        "url": "a=b=c",
        "n": 5,
        "j": {"k": "v=w"},
        "s": "x=y",
        "empty": "",
        "flag": True,
        "none": None,
        "list": [1, 2],
    }


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["-a", "x=1", "-a", "x=2"], "-a x: given twice"),
        (["-a", "x=1", "-a", "x:=2"], "-a x: given twice"),
        (["-a", "novalue"], "expected NAME=VALUE"),
        (["-a", "=v"], "the name is empty"),
        (["-a", "n:=[1,"], "not JSON"),
        (["--args-json", "[1]"], "expected a JSON object"),
        (["--args-json", "{"], "not JSON"),
        (["--priority", "high"], "priority"),
        (["--bogus"], "No such option"),
    ],
)
def test_usage_errors_exit_2_and_write_nothing(spool_in: Run, spool_dir: Path, args: list[str], words: str) -> None:
    one_line_error(spool_in("submit", "echo", "--key", "k", *args), 2, words)
    assert job_files(spool_dir) == [] and os.listdir(spool_dir / "keys") == []


def test_args_json_and_dash_a_together(spool_in: Run, sp: Spool) -> None:
    ran = spool_in("submit", "echo", "--args-json", '{"a": [1, {"b": null}], "c": "d"}', "-a", "e=f")
    assert ran.code == 0, ran
    assert read_job(sp, State.PENDING, ran.out.strip()).job.args == {"a": [1, {"b": None}], "c": "d", "e": "f"}


def test_submit_options_land_in_the_job(spool_in: Run, sp: Spool) -> None:
    parent = sp.submit("echo")
    ran = spool_in(
        "submit",
        "echo",
        "--key",
        "inv-1",
        "--priority",
        "7",
        "--max-tries",
        "2",
        "--timeout",
        "5m",
        "--delay",
        "1h",
        "--depends-on",
        parent,
    )
    assert ran.code == 0, ran
    job_file = read_job(sp, State.WAITING, ran.out.strip())
    job = job_file.job
    assert (job.key, job.priority, job.max_tries, job.timeout, job.depends_on) == ("inv-1", 7, 2, 300.0, (parent,))
    assert job.not_before is not None


def test_submit_a_job_file_and_from_stdin(spool_in: Run, sp: Spool, tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text("task: echo\nargs: {n: 0123, on: yes}\nkey: from-file\npriority: 2\n")
    ran = spool_in("submit", "-f", str(path))
    assert ran.code == 0, ran
    job = read_job(sp, State.PENDING, ran.out.strip()).job
    assert job.args == {"n": 123, "on": "yes"} and job.key == "from-file" and job.priority == 2  # YAML 1.2
    assert spool_in("submit", "-f", str(path)).out == ran.out  # same key, same id
    piped = spool_in("submit", "-f", "-", "--priority", "9", input="task: echo\nargs: {via: stdin}\n")
    assert piped.code == 0, piped
    job = read_job(sp, State.PENDING, piped.out.strip()).job
    assert job.args == {"via": "stdin"} and job.priority == 9  # a flag beats the file
    one_line_error(spool_in("submit", "echo", "-f", str(path)), 2, "don't give TASK")


def test_submit_with_the_same_key_prints_the_same_id(spool_in: Run, spool_dir: Path) -> None:
    first = spool_in("submit", "echo", "--key", "k")
    again = spool_in("submit", "other", "--key", "k", "-a", "x=1")
    assert first.code == again.code == 0 and first.out == again.out
    assert json.loads(spool_in("submit", "echo", "--key", "k", "--json").out) == {
        "id": first.out.strip(),
        "created": False,
    }
    assert len(job_files(spool_dir)) == 1


def test_submit_past_max_pending_exits_75_and_writes_no_job_and_no_key(spool_in: Run, spool_dir: Path) -> None:
    for n in range(2):
        assert spool_in("--max-pending", "2", "submit", "echo", "--key", f"k{n}").code == 0
    full = spool_in("--max-pending", "2", "submit", "echo", "--key", "third")
    one_line_error(full, 75, "spool is full", "nothing was written")
    assert len(job_files(spool_dir)) == 2
    assert sorted(os.listdir(spool_dir / "keys")) == sorted([key_name("k0"), key_name("k1")])
    assert os.listdir(spool_dir / "tmp") == []


def test_depends_on_a_missing_id_exits_3(spool_in: Run, spool_dir: Path) -> None:
    one_line_error(spool_in("submit", "echo", "--depends-on", new_id()), 3, "depends_on: no job")
    one_line_error(spool_in("submit", "echo", "--depends-on", "../etc"), 2, "is not a job id")
    assert job_files(spool_dir) == []


# -- status, result, wait, cancel -------------------------------------------------------------------


def test_status_json_has_every_key_of_the_spec(spool_in: Run, sp: Spool) -> None:
    job_id = sp.submit("echo", key="k")
    claim(sp, "w1", None)
    view = json.loads(spool_in("status", job_id, "--json").out)
    assert STATUS_KEYS <= set(view)
    assert (
        view["id"],
        view["key"],
        view["task"],
        view["state"],
        view["attempt"],
        view["tries"],
        view["max_tries"],
    ) == (job_id, "k", "echo", "leased", 1, 1, 3)
    assert set(view["lease"]) == LEASE_KEYS and view["lease"]["worker"] == "w1"
    assert len(view["attempts"]) == 1 and set(view["attempts"][0]) == ATTEMPT_KEYS
    assert view["result"] is None and view["reason"] is None and view["error"] is None
    complete(sp, Lease(job_id, "w1", 1), b"1")
    done = json.loads(spool_in("--json", "status", job_id).out)
    assert done["state"] == "done" and done["lease"] is None
    assert done["result"] == str(sp.root / "results" / f"{job_id}.json")


def test_status_for_people_says_the_error(spool_in: Run, sp: Spool) -> None:
    job_id = finished(sp, ok=False)
    ran = spool_in("status", job_id)
    assert ran.code == 0 and "state:" in ran.out and "dead" in ran.out and "ValueError: boom" in ran.out


def test_ls_json_is_a_list_of_status_objects_newest_first(spool_in: Run, sp: Spool) -> None:
    ids = [sp.submit("echo") for _ in range(3)]
    views = json.loads(spool_in("ls", "--json").out)
    assert [v["id"] for v in views] == ids[::-1] and all(STATUS_KEYS <= set(v) for v in views)
    sp.cancel(ids[0])
    assert [v["id"] for v in json.loads(spool_in("--json", "ls", "--state", "dead").out)] == [ids[0]]
    assert [v["id"] for v in json.loads(spool_in("ls", "--reason", "cancelled", "--json").out)] == [ids[0]]
    table = spool_in("ls")
    assert table.code == 0 and all(job_id in table.out for job_id in ids)


def test_result_prints_the_json_exits_1_when_dead_and_3_before_there_is_one(spool_in: Run, sp: Spool) -> None:
    done = finished(sp, ok=True)
    ran = spool_in("result", done)
    assert ran.code == 0 and json.loads(ran.out) == {"v": 1}
    one_line_error(spool_in("result", finished(sp, ok=False)), 1, "dead", "no result")
    one_line_error(spool_in("result", sp.submit("echo")), 3, "no result yet")
    one_line_error(spool_in("result", new_id()), 3, "no job")


@pytest.mark.parametrize("command", ["status", "result", "cancel", "requeue", "logs", "wait"])
def test_an_unknown_id_exits_3_and_a_path_traversing_one_2(spool_in: Run, command: str) -> None:
    one_line_error(spool_in(command, new_id()), 3, "no job")
    one_line_error(spool_in(command, "../../etc/passwd"), 2, "is not a job id")


def test_cancel_of_a_done_job_exits_1_and_changes_nothing(spool_in: Run, sp: Spool) -> None:
    job_id = finished(sp, ok=True)
    one_line_error(spool_in("cancel", job_id), 1, "already done; nothing changed")
    assert sp.state(job_id) is State.DONE
    pending = sp.submit("echo")
    ran = spool_in("cancel", pending)
    assert ran.code == 0 and sp.state(pending) is State.DEAD
    claimed = sp.submit("echo")
    claim(sp, "w", None)
    assert json.loads(spool_in("cancel", claimed, "--json").out) == {"id": claimed, "cancel": "requested"}


def test_wait_exits_0_when_all_are_done_1_if_one_is_dead_124_on_timeout(spool_in: Run, sp: Spool) -> None:
    ok, bad = finished(sp, ok=True), finished(sp, ok=False)
    ran = spool_in("wait", ok)
    assert ran.code == 0 and ran.out == f"{ok} done\n"
    dead = spool_in("wait", ok, bad, "--json")
    assert dead.code == 1 and json.loads(dead.out) == {ok: "done", bad: "dead"}
    pending = sp.submit("echo")
    timed_out = spool_in("wait", ok, pending, "--timeout", "0.3")
    assert timed_out.code == 124 and f"{pending} pending" in timed_out.out


def test_requeue_a_dead_job_and_refuse_a_pending_one(spool_in: Run, sp: Spool) -> None:
    dead = finished(sp, ok=False)
    ran = spool_in("requeue", dead)
    assert ran.code == 0 and sp.state(dead) is State.PENDING
    one_line_error(spool_in("requeue", dead), 1, "not dead; nothing changed")
    one_line_error(spool_in("requeue"), 2, "one ID or --all-dead")


# -- --json placement, stats, fsck, purge ------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["--json", "stats"],
        ["stats", "--json"],
        ["--json", "config"],
        ["config", "--json"],
        ["--json", "fsck"],
        ["fsck", "--json"],
        ["--json", "ls"],
        ["ls", "--json"],
        ["--json", "crash-points"],
        ["crash-points", "--json"],
    ],
)
def test_json_before_or_after_the_subcommand_is_one_document(spool_in: Run, sp: Spool, args: list[str]) -> None:
    sp.submit("echo")
    ran = spool_in(*args)
    assert ran.code == 0, ran
    json.loads(ran.out)


def test_stats_counts_per_state_and_says_no_coordinator(spool_in: Run, sp: Spool) -> None:
    finished(sp, ok=True)
    sp.submit("echo")
    view = json.loads(spool_in("stats", "--json").out)
    assert view["counts"] == {"done": 1, "pending": 1} and view["ready"] == 1
    assert view["coordinator"] == "no coordinator has run yet"
    assert "pending 1" in spool_in("stats").out


def test_fsck_exits_0_when_every_promise_holds_and_1_otherwise(spool_in: Run, sp: Spool) -> None:
    finished(sp, ok=True)
    ran = spool_in("fsck")
    assert ran.code == 0 and "every promise holds" in ran.out
    (sp.root / "done" / "stray.txt").write_text("x")
    broken = spool_in("fsck", "--json")
    assert broken.code == 1 and json.loads(broken.out)["ok"] is False


def test_purge_removes_old_finished_jobs(spool_in: Run, sp: Spool) -> None:
    job_id = finished(sp, ok=True)
    assert json.loads(spool_in("purge", "--older-than", "1h", "--json").out) == {"purged": []}
    assert json.loads(spool_in("purge", "--older-than", "0s", "--json").out) == {"purged": [job_id]}
    one_line_error(spool_in("purge", "--older-than", "1d", "--state", "pending"), 1, "not finished")


# -- refusals, init, config, crash-points -------------------------------------------------------------


ARGS_FOR = {
    "submit": ["echo"],
    "status": ["X1"],
    "result": ["X1"],
    "wait": ["X1"],
    "ls": [],
    "stats": [],
    "fsck": [],
    "requeue": ["X1"],
    "cancel": ["X1"],
    "purge": ["--older-than", "1d"],
    "logs": ["X1"],
    "config": [],
    "coordinator": [],
    "worker": ["--burst"],
    "run": ["--workers", "0"],
    "schedule": ["list"],
    "queue": ["list"],
    "serve": ["--self-signed", "--port", "0"],
    "token": ["list"],
}
NEEDS_NO_SPOOL = {"init", "crash-points", "demo", "dispatch", "run-one"}  # the last two: over the API
RUNS_PROCESSES = {"coordinator", "worker", "run", "serve"}  # checked as real processes: they must never start


def test_every_command_that_uses_a_spool_refuses_a_folder_without_the_marker(tmp_path: Path, spool_run: Run) -> None:
    (tmp_path / "spool").mkdir()
    (tmp_path / "spool" / "main.py").write_text("print('my code')")
    commands = set(cli.commands) - NEEDS_NO_SPOOL
    assert commands == set(ARGS_FOR), "a new command needs a line in ARGS_FOR"
    for name in sorted(commands - RUNS_PROCESSES):
        ran = spool_run("--spool", str(tmp_path / "spool"), name, *ARGS_FOR[name])
        one_line_error(ran, 1, "not a spool; run `spool init`")
    for name in sorted(RUNS_PROCESSES):
        proc = run_spool(name, *ARGS_FOR[name], spool=tmp_path / "spool", timeout=30)
        assert proc.returncode == 1 and "not a spool; run `spool init`" in proc.stderr, (name, proc.stderr)
        assert "Traceback" not in proc.stderr
    assert os.listdir(tmp_path / "spool") == ["main.py"]


def test_the_default_spool_is_dot_slash_spool_and_spool_dir_names_another(tmp_path: Path) -> None:
    proc = run_spool("ls", cwd=tmp_path)
    assert proc.returncode == 1 and "not a spool" in proc.stderr and "Traceback" not in proc.stderr
    Spool.init(tmp_path / "elsewhere", environ={}).close()
    assert run_spool("ls", cwd=tmp_path, env={"SPOOL_DIR": str(tmp_path / "elsewhere")}).returncode == 0


def test_init_creates_a_spool_and_refuses_a_non_empty_folder(tmp_path: Path, spool_run: Run) -> None:
    ran = spool_run("--spool", str(tmp_path / "new"), "init")
    assert ran.code == 0 and (tmp_path / "new" / ".spool").exists()
    assert spool_run("--spool", str(tmp_path / "new"), "init").code == 0  # again: harmless
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "notes.txt").write_text("mine")
    one_line_error(spool_run("--spool", str(tmp_path / "src"), "init"), 1, "not empty and is not a spool")
    assert os.listdir(tmp_path / "src") == ["notes.txt"]


def test_config_shows_values_and_sources_and_a_flag_beats_env_beats_the_file(spool_in: Run, spool_dir: Path) -> None:
    (spool_dir / "config.yaml").write_text("lease_seconds: 10\nmax_tries: 5\npoll_seconds: 1m\n")
    env = {"SPOOL_LEASE_SECONDS": "20", "SPOOL_MAX_TRIES": "6"}
    view = json.loads(spool_in("--lease-seconds", "30", "config", "--json", env=env).out)
    assert view["lease_seconds"] == {"value": 30.0, "source": "flag --lease-seconds"}
    assert view["max_tries"] == {"value": 6, "source": "env SPOOL_MAX_TRIES"}
    assert view["poll_seconds"] == {"value": 60.0, "source": "config.yaml"}
    assert view["backoff_max_seconds"] == {"value": 300.0, "source": "default"}
    assert json.loads(spool_in("config", "--json", env=env).out)["lease_seconds"]["source"] == "env SPOOL_LEASE_SECONDS"
    assert json.loads(spool_in("config", "--json").out)["lease_seconds"] == {"value": 10.0, "source": "config.yaml"}
    table = spool_in("config").out
    assert any(line.split()[:3] == ["lease_seconds", "10.0", "config.yaml"] for line in table.splitlines())
    one_line_error(spool_in("--lease-seconds", "soon", "config"), 2, "lease_seconds")


def test_crash_points_lists_every_point_the_spec_names(tmp_path: Path) -> None:
    proc = run_spool("crash-points", cwd=tmp_path)  # needs no spool
    assert proc.returncode == 0
    points = proc.stdout.split()
    for name in ("worker:after-claim", "worker:after-result", "coordinator:after-expire"):
        assert name in points
    assert len(points) == len(set(points))


def test_a_real_process_sees_the_same_exit_codes(spool_dir: Path) -> None:
    with Spool(spool_dir, environ={}) as sp:
        done = finished(sp, ok=True)
    cancel = run_spool("cancel", done, spool=spool_dir)
    assert cancel.returncode == 1 and cancel.stderr == f"spool: {done}: already done; nothing changed\n"
    missing = run_spool("status", new_id(), spool=spool_dir)
    assert missing.returncode == 3 and "Traceback" not in missing.stderr
    twice = run_spool("submit", "echo", "-a", "k=1", "-a", "k=2", spool=spool_dir)
    assert twice.returncode == 2 and twice.stderr.count("\n") == 1
