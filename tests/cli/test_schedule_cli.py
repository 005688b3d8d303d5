"""``spool schedule add/list/enable/disable/rm/run`` through the command line (``--json`` too),
and chains you can see: ``spool status`` (parents, waiting_for, children, schedule) and
``spool ls --task/--schedule``."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from spool.admin import cancel
from spool.spool import Spool
from spool.moves.chains import advance_waiting
from support import run_spool

Ran = Any
Run = Callable[..., Ran]


def ok(ran: Ran) -> Ran:
    assert ran.code == 0, ran.err
    return ran


def test_add_writes_the_file_and_list_shows_it(spool_in: Run, spool_dir: Path) -> None:
    ok(
        spool_in(
            "schedule",
            "add",
            "tick",
            "echo",
            "--every",
            "30s",
            "-a",
            "n:=1",
            "-a",
            "who=me",
            "--priority",
            "2",
            "--max-tries",
            "4",
            "--timeout",
            "5s",
        )
    )
    text = (spool_dir / "schedules" / "tick.yaml").read_text()
    assert "every: 30s" in text and "task: echo" in text
    assert list((spool_dir / "tmp").iterdir()) == []
    ok(
        spool_in(
            "schedule", "add", "nightly", "wordcount", "--cron", "30 2 * * *", "--tz", "Europe/Berlin", "-a", "path=/x"
        )
    )
    views = {v["name"]: v for v in json.loads(ok(spool_in("schedule", "list", "--json")).out)}
    assert views["tick"]["expression"] == "every 30s" and views["tick"]["enabled"] is True
    assert views["tick"]["next"].endswith(("00.000Z", "30.000Z")) and views["tick"]["last_slot"] is None
    assert views["nightly"]["expression"] == "cron 30 2 * * * (Europe/Berlin)"
    table = ok(spool_in("schedule", "list")).out
    assert "tick" in table and "every 30s" in table and "nightly" in table


def test_add_json_prints_the_schedule(spool_in: Run) -> None:
    view = json.loads(ok(spool_in("schedule", "add", "tick", "echo", "--every", "1m", "--json")).out)
    assert view["name"] == "tick" and view["task"] == "echo" and view["error"] is None


def test_add_refusals(spool_in: Run, spool_dir: Path) -> None:
    assert spool_in("schedule", "add", "x", "echo").code == 2  # neither --cron nor --every
    assert spool_in("schedule", "add", "x", "echo", "--every", "1m", "--cron", "* * * * *").code == 2
    assert spool_in("schedule", "add", "x", "echo", "--every", "1m", "--tz", "UTC").code == 2
    bad = spool_in("schedule", "add", "x", "echo", "--cron", "61 * * * *")
    assert bad.code == 2 and "not a valid cron expression" in bad.err
    assert spool_in("schedule", "add", "x", "echo", "--every", "0s").code == 2
    assert spool_in("schedule", "add", "x", "echo", "--cron", "* * * * *", "--tz", "Nowhere/Land").code == 2
    assert spool_in("schedule", "add", "../x", "echo", "--every", "1m").code == 2
    assert list((spool_dir / "schedules").iterdir()) == [] and list((spool_dir / "tmp").iterdir()) == []
    ok(spool_in("schedule", "add", "x", "echo", "--every", "1m"))
    taken = spool_in("schedule", "add", "x", "echo", "--every", "2m")
    assert taken.code == 2 and "exists" in taken.err


def test_disable_enable_and_rm(spool_in: Run, spool_dir: Path) -> None:
    ok(spool_in("schedule", "add", "tick", "echo", "--every", "1m"))
    view = json.loads(ok(spool_in("schedule", "disable", "tick", "--json")).out)
    assert view["enabled"] is False and view["next"] is None
    assert "enabled: false" in (spool_dir / "schedules" / "tick.yaml").read_text()
    assert ok(spool_in("schedule", "enable", "tick")).out.strip() == "schedule tick enabled"
    assert json.loads(ok(spool_in("schedule", "list", "--json")).out)[0]["enabled"] is True
    assert json.loads(ok(spool_in("schedule", "rm", "tick", "--json")).out) == {"removed": "tick"}
    assert list((spool_dir / "schedules").iterdir()) == []
    for verb in ("rm", "enable", "disable", "run"):
        missing = spool_in("schedule", verb, "tick")
        assert missing.code == 3, (verb, missing.err)


def test_run_submits_one_job_now_keyed_to_now(spool_in: Run, sp: Spool) -> None:
    ok(spool_in("schedule", "add", "tick", "echo", "--every", "1h", "-a", "n:=7"))
    job_id = ok(spool_in("schedule", "run", "tick")).out.strip()
    state, job_file = sp.job(job_id)
    assert state.value == "pending" and job_file.job.args == {"n": 7}
    assert job_file.job.key.startswith("schedule:tick@") and job_file.job.key.endswith("Z")
    ran = json.loads(ok(spool_in("schedule", "run", "tick", "--json")).out)
    assert ran["created"] is True and ran["id"] != job_id and ran["schedule"] == "tick"
    view = {v["name"]: v for v in json.loads(ok(spool_in("schedule", "list", "--json")).out)}["tick"]
    assert view["last_job"] == ran["id"] and view["last_state"] == "pending"


def test_a_broken_file_is_listed_with_its_error(spool_in: Run, spool_dir: Path) -> None:
    ok(spool_in("schedule", "add", "good", "echo", "--every", "1m"))
    (spool_dir / "schedules" / "bad.yaml").write_text("task: echo\ncron: '* * * * *'\nevery: 1m\n")
    (spool_dir / "schedules" / "editing.yaml.tmp").write_text("half")  # never read
    views = {v["name"]: v for v in json.loads(ok(spool_in("schedule", "list", "--json")).out)}
    assert set(views) == {"good", "bad"}
    assert "exactly one of 'cron' and 'every'" in views["bad"]["error"] and views["bad"]["next"] is None
    assert views["good"]["error"] is None
    table = ok(spool_in("schedule", "list")).out
    assert "BROKEN" in table and "exactly one of" in table
    refused = spool_in("schedule", "run", "bad")
    assert refused.code == 2 and "exactly one of" in refused.err


def test_schedule_commands_as_a_real_process(spool_dir: Path) -> None:
    added = run_spool("--json", "schedule", "add", "tick", "echo", "--every", "1m", spool=spool_dir)
    assert added.returncode == 0 and json.loads(added.stdout)["name"] == "tick"
    assert run_spool("schedule", "rm", "nope", spool=spool_dir).returncode == 3


# -- chains you can see -------------------------------------------------------------------------


def test_status_shows_what_a_waiting_job_waits_for_and_a_jobs_children(spool_in: Run, sp: Spool) -> None:
    parent = sp.submit("echo", {})
    other = sp.submit("echo", {})
    child = sp.submit("echo", {}, depends_on=[parent, other])
    view = json.loads(ok(spool_in("status", child, "--json")).out)
    assert view["state"] == "waiting"
    assert view["parents"] == [
        {"id": parent, "state": "pending", "reason": None},
        {"id": other, "state": "pending", "reason": None},
    ]
    assert view["waiting_for"] == [parent, other]
    assert json.loads(ok(spool_in("status", parent, "--json")).out)["children"] == [
        {"id": child, "state": "waiting", "reason": None}
    ]
    text = ok(spool_in("status", child)).out
    assert f"waiting for:     {parent} (pending), {other} (pending)" in text
    assert f"children:        {child} (waiting)" in ok(spool_in("status", parent)).out


def test_status_shows_what_a_skipped_job_was_skipped_because_of(spool_in: Run, sp: Spool) -> None:
    parent = sp.submit("echo", {})
    child = sp.submit("echo", {}, depends_on=[parent])
    cancel(sp, parent)
    advance_waiting(sp, child)
    view = json.loads(ok(spool_in("status", child, "--json")).out)
    assert view["reason"] == "skipped" and view["skipped_because"] == parent
    assert view["parents"] == [{"id": parent, "state": "dead", "reason": "cancelled"}]
    text = ok(spool_in("status", child)).out
    assert f"skipped because: {parent}" in text and "(dead: cancelled)" in text


def test_ls_filters_by_task_and_schedule(spool_in: Run, sp: Spool) -> None:
    ok(spool_in("schedule", "add", "tick", "echo", "--every", "1h"))
    fired = ok(spool_in("schedule", "run", "tick")).out.strip()
    plain = sp.submit("echo", {})
    counted = sp.submit("wordcount", {"path": "/x"})
    by_task = [v["id"] for v in json.loads(ok(spool_in("ls", "--task", "echo", "--json")).out)]
    assert sorted(by_task) == sorted([fired, plain])
    by_schedule = json.loads(ok(spool_in("ls", "--schedule", "tick", "--json")).out)
    assert [v["id"] for v in by_schedule] == [fired] and by_schedule[0]["schedule"] == "tick"
    assert [v["id"] for v in json.loads(ok(spool_in("ls", "--task", "wordcount", "--json")).out)] == [counted]
    assert json.loads(ok(spool_in("ls", "--schedule", "nope", "--json")).out) == []
    assert fired in ok(spool_in("ls", "--schedule", "tick")).out
