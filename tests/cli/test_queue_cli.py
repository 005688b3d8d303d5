"""``spool queue list|set|pause|resume``, ``--queue`` on submit, ls and schedule add, and what
status and stats say about queues (README: "Queues and limits")."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from spool.moves.transitions import claim
from spool.spool import Spool
from support import wait_until

Ran = Any  # conftest.Ran: code, out, err
Run = Callable[..., Ran]


def listed(run: Run) -> dict[str, dict[str, Any]]:
    ran = run("queue", "list", "--json")
    assert ran.code == 0, ran
    return {view["name"]: view for view in json.loads(ran.out)}


def test_set_pause_resume_and_list_round_trip_in_real_processes(spool_cli: Any, spool_dir: Path) -> None:
    ran = spool_cli("queue", "set", "email", "--concurrency", "2", "--rate", "5/s")
    assert ran.returncode == 0 and ran.stdout == "queue email: concurrency 2, rate 5/s\n", ran
    assert (spool_dir / "queues" / "email.yaml").read_text() == "concurrency: 2\nrate: 5/s\npaused: false\n"
    assert spool_cli("queue", "pause", "email").stdout == "queue email paused\n"
    views = json.loads(spool_cli("queue", "list", "--json").stdout)
    assert views == [
        {
            "name": "email",
            "concurrency": 2,
            "rate": "5/s",
            "paused": True,
            "error": None,
            "pending": 0,
            "ready": 0,
            "leased": 0,
            "claims_last_minute": 0,
            "oldest_ready_seconds": None,
            "held_by": {"queue": "email", "limit": "paused", "text": "queue email is paused"},
        }
    ]
    resumed = json.loads(spool_cli("queue", "resume", "email", "--json").stdout)
    assert resumed["paused"] is False and resumed["held_by"] is None and resumed["concurrency"] == 2
    table = spool_cli("queue", "list").stdout.splitlines()
    assert table[0].split()[:3] == ["queue", "concurrency", "rate"] and table[1].split()[:4] == [
        "email",
        "2",
        "5/s",
        "no",
    ]
    cleared = json.loads(spool_cli("queue", "--json", "set", "email", "--clear").stdout)
    assert (cleared["concurrency"], cleared["rate"], cleared["paused"]) == (None, None, False)


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["set", "email"], "needs --concurrency"),
        (["set", "email", "--rate", "5/x"], "'rate'"),
        (["set", "email", "--rate", "0/s"], "'rate'"),
        (["set", "email", "--concurrency", "0"], "'concurrency'"),
        (["set", "email", "--concurrency", "two"], "--concurrency"),
        (["set", "email", "--concurrency", "--3"], "--concurrency"),
        (["set", "email", "--concurrency", "-1"], "'concurrency'"),
        (["set", "email", "--concurrency", "1.5"], "--concurrency"),
        (["set", "a/b", "--concurrency", "1"], "a queue's name"),
        (["pause", "../x"], "a queue's name"),
        (["resume", "a b"], "a queue's name"),
    ],
)
def test_bad_input_exits_2_with_one_line_and_writes_nothing(
    spool_in: Run, spool_dir: Path, args: list[str], words: str
) -> None:
    spool_in("queue", "set", "email", "--concurrency", "3")
    before = (spool_dir / "queues" / "email.yaml").read_bytes()
    ran = spool_in("queue", *args)
    assert ran.code == 2 and len(ran.err.strip().splitlines()) == 1 and words in ran.err, ran
    assert sorted(os.listdir(spool_dir / "queues")) == ["email.yaml"]
    assert (spool_dir / "queues" / "email.yaml").read_bytes() == before
    assert not [name for name in os.listdir(spool_dir / "tmp") if not name.startswith(".")]
    assert listed(spool_in)["email"]["concurrency"] == 3


def test_a_broken_file_is_listed_with_its_error_and_the_last_valid_limits_hold(
    spool_in: Run, spool_cli: Any, spool_dir: Path, sp: Spool
) -> None:
    spool_in("queue", "set", "gpu", "--concurrency", "1")
    first, second = sp.submit("echo", queue="gpu"), sp.submit("echo", queue="gpu")
    (spool_dir / "queues" / "gpu.yaml").write_text("concurrency: many\n")  # by hand, and wrong
    view = json.loads(spool_cli("queue", "list", "--json").stdout)[0]
    assert view["name"] == "gpu" and view["concurrency"] == 1
    assert "'concurrency'" in view["error"] and "many" in view["error"]
    assert "BROKEN" in spool_cli("queue", "list").stdout
    taken = claim(sp, "w", None)
    assert taken is not None and taken.id == first
    assert claim(sp, "w", None) is None  # the old concurrency 1 still holds
    status = json.loads(spool_cli("status", second, "--json").stdout)
    assert status["held_by"]["limit"] == "concurrency"
    refused = spool_in("queue", "set", "gpu", "--rate", "1/s")
    assert refused.code == 2 and "--clear" in refused.err  # a broken file is fixed by hand or cleared
    spool_in("queue", "set", "gpu", "--clear")
    assert listed(spool_in)["gpu"]["error"] is None
    assert claim(sp, "w", None) is not None


def test_status_says_the_queue_and_the_limit_that_holds_a_job(spool_in: Run, spool_cli: Any, sp: Spool) -> None:
    spool_in("queue", "pause", "email")
    held = spool_cli("submit", "echo", "--queue", "email").stdout.strip()
    free = sp.submit("echo")
    view = json.loads(spool_cli("status", held, "--json").stdout)
    assert view["queue"] == "email"
    assert view["held_by"] == {"queue": "email", "limit": "paused", "text": "queue email is paused"}
    page = spool_in("status", held).out
    assert "queue:           email" in page and "held by:         paused: queue email is paused" in page
    other = json.loads(spool_in("status", free, "--json").out)
    assert other["queue"] == "default" and other["held_by"] is None
    spool_in("queue", "resume", "email")
    spool_in("queue", "set", "email", "--concurrency", "1")
    taken = claim(sp, "w", None, queues=["email"])
    assert taken is not None and taken.id == held
    assert json.loads(spool_in("status", held, "--json").out)["held_by"] is None  # leased: nothing holds it
    behind = sp.submit("echo", queue="email")
    view = json.loads(spool_in("status", behind, "--json").out)
    assert view["held_by"]["limit"] == "concurrency" and "(1 leased)" in view["held_by"]["text"]
    later = sp.submit("echo", queue="email", delay_seconds=3600)
    assert json.loads(spool_in("status", later, "--json").out)["held_by"] is None  # not ready: its delay holds it


def test_submit_ls_and_schedule_add_take_a_queue(spool_in: Run, spool_dir: Path, sp: Spool) -> None:
    mail = spool_in("submit", "echo", "--queue", "email").out.strip()
    plain = spool_in("submit", "echo").out.strip()
    assert "queue: email" in (spool_dir / "pending" / f"{mail}.yaml").read_text()
    assert "queue:" not in (spool_dir / "pending" / f"{plain}.yaml").read_text()  # the default is not written
    assert [v["id"] for v in json.loads(spool_in("ls", "--queue", "email", "--json").out)] == [mail]
    assert [v["id"] for v in json.loads(spool_in("ls", "--queue", "default", "--json").out)] == [plain]
    assert json.loads(spool_in("ls", "--queue", "nothing", "--json").out) == []
    assert spool_in("ls").out.splitlines()[0].split()[:4] == ["id", "state", "task", "queue"]
    bad = spool_in("submit", "echo", "--queue", "a/b")
    assert bad.code == 2 and "'queue'" in bad.err
    added = spool_in("schedule", "add", "nightly", "echo", "--every", "1h", "--queue", "email")
    assert added.code == 0, added
    assert "queue: email" in (spool_dir / "schedules" / "nightly.yaml").read_text()
    fired = spool_in("schedule", "run", "nightly").out.strip()
    assert json.loads(spool_in("status", fired, "--json").out)["queue"] == "email"


def test_stats_has_a_section_per_queue(spool_in: Run, sp: Spool) -> None:
    spool_in("queue", "set", "api", "--rate", "1/h")
    sp.submit("echo", queue="api")
    second = sp.submit("echo", queue="api")
    sp.submit("echo")
    assert claim(sp, "w", None, queues=["api"]) is not None
    view = json.loads(spool_in("stats", "--json").out)
    queues = {queue["name"]: queue for queue in view["queues"]}
    assert (queues["api"]["pending"], queues["api"]["leased"], queues["api"]["claims_last_minute"]) == (1, 1, 1)
    assert queues["api"]["rate"] == "1/h" and queues["api"]["held_by"]["limit"] == "rate"
    assert queues["api"]["oldest_ready_seconds"] is not None
    assert queues["default"]["pending"] == 1 and queues["default"]["held_by"] is None
    held = json.loads(spool_in("status", second, "--json").out)["held_by"]
    assert held["limit"] == "rate" and "rate 1 per h (1 claims in the window)" in held["text"]
    text = spool_in("stats").out
    assert "queue api: pending 1  leased 1  claims last minute 1" in text and "(rate 1/h); held: queue api" in text


FAST = ("--lease-seconds", "2", "--poll-seconds", "0.2")


def _state(spool_cli: Any, job_id: str) -> dict[str, Any]:
    ran = spool_cli("status", job_id, "--json")
    assert ran.returncode == 0, ran.stderr
    return json.loads(ran.stdout)


def test_under_spool_run_a_paused_queue_holds_its_jobs_says_why_and_resume_releases_them(
    spool_cli: Any, spool_dir: Path, procs: Any
) -> None:
    assert spool_cli("queue", "pause", "email").returncode == 0
    held = spool_cli("submit", "echo", "-a", "n=1", "--queue", "email").stdout.strip()
    free = spool_cli("submit", "echo", "-a", "n=2").stdout.strip()
    procs.start(*FAST, "run", "--workers", "1", "--import", "examples.tasks", name="run")
    wait_until(lambda: _state(spool_cli, free)["state"] == "done", timeout=60, message="the default queue's job done")
    view = _state(spool_cli, held)
    assert view["state"] == "pending" and view["tries"] == 0 and view["held_by"]["limit"] == "paused"
    (spool_dir / "queues" / "email.yaml").write_text("paused: false\n")  # resumed by hand: the coordinator reads it
    wait_until(lambda: _state(spool_cli, held)["state"] == "done", timeout=60, message="the resumed queue's job done")
    assert _state(spool_cli, held)["tries"] == 1  # the pause spent no try


def test_without_a_usable_ledger_list_shows_the_files_and_says_why(spool_in: Run, spool_dir: Path) -> None:
    spool_in("queue", "set", "gpu", "--concurrency", "2")
    for name in os.listdir(spool_dir):
        if name.startswith("ledger.sqlite3"):
            os.unlink(spool_dir / name)
    (spool_dir / "ledger.sqlite3").mkdir()  # no ledger can be opened here
    ran = spool_in("queue", "list", "--json")
    assert ran.code == 0 and "without counts" in ran.err, ran
    [view] = json.loads(ran.out)
    assert (view["name"], view["concurrency"], view["pending"], view["held_by"]) == ("gpu", 2, None, None)
