"""The CLI says what it left out and names things as users write them (issue 22's "The CLI")."""

from __future__ import annotations

import ast
import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import spool.cli
from spool import Spool
from support import Procs, run_spool, wait_until

Run = Callable[..., Any]


def test_ls_shows_the_newest_50_and_says_how_many_more_on_stderr(spool_in: Run, sp: Spool) -> None:
    ids = [s.id for s in sp.submit_many([sp.spec("echo", {"n": n}) for n in range(57 + 50)])]
    newest = sorted(ids, reverse=True)
    plain = spool_in("ls")
    rows = plain.out.splitlines()
    assert rows[0].split()[:2] == ["id", "state"] and len(rows) == 1 + 50, plain.out
    assert [row.split()[0] for row in rows[1:]] == newest[:50]
    assert plain.err == "... 57 more; --limit N or --all to see them\n", plain.err
    as_json = spool_in("ls", "--json")  # for scripts: every job, as before the table's default
    assert [v["id"] for v in json.loads(as_json.out)] == newest and as_json.err == ""
    capped = spool_in("ls", "--json", "--limit", "50")  # stdout stays one JSON document
    assert [v["id"] for v in json.loads(capped.out)] == newest[:50] and "57 more" in capped.err
    every = spool_in("ls", "--all", "--json")
    assert [v["id"] for v in json.loads(every.out)] == newest and every.err == ""
    hundred = spool_in("ls", "--limit", "100")
    assert len(hundred.out.splitlines()) == 101 and "7 more" in hundred.err
    assert spool_in("ls", "--state", "pending", "--limit", "200").err == ""
    both = spool_in("ls", "--all", "--limit", "5")
    assert both.code == 2 and "--all" in both.err and both.out == ""


def test_ls_says_nothing_more_when_every_row_fits(spool_in: Run, sp: Spool) -> None:
    for n in range(3):
        sp.submit("echo", {"n": n})
    ran = spool_in("ls")
    assert len(ran.out.splitlines()) == 4 and ran.err == ""


def _table_headers() -> list[tuple[str, list[str]]]:
    """Every literal header list handed to ``render_table`` in cli/."""
    found = []
    for path in sorted(Path(spool.cli.__file__).parent.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "render_table" and node.args:
                headers = ast.literal_eval(node.args[0])
                found.append((f"{path.name}:{node.lineno}", list(headers)))
    return found


def test_every_table_has_lower_case_headers() -> None:
    tables = _table_headers()
    assert len(tables) >= 5, tables  # ls, config, schedule list, queue list, token list
    assert [(where, h) for where, h in tables if h != [name.lower() for name in h]] == []


def test_token_list_headers_are_lower_case_like_the_others(spool_in: Run) -> None:
    assert spool_in("token", "add", "ci", "--role", "submit").code == 0
    assert spool_in("token", "list").out.splitlines()[0].split() == ["name", "role", "created", "last", "used"]
    assert spool_in("config").out.splitlines()[0].split() == ["setting", "value", "from"]


def test_a_reject_is_named_as_users_import_it(
    spool_cli: Callable[..., subprocess.CompletedProcess[str]], sp: Spool
) -> None:
    """A handler's ``raise spool.Reject("not a JPEG")``, run by a real worker: the stored error,
    and so status and the dashboard, say ``Reject: not a JPEG``."""
    job_id = sp.submit("reject", {"why": "not a JPEG"})
    ran = spool_cli("worker", "--burst", "--import", "examples.tasks")
    assert ran.returncode == 0, ran
    assert sp.status(job_id)["error"] == "Reject: not a JPEG"
    shown = spool_cli("status", job_id)
    assert "  Reject: not a JPEG" in shown.stdout and "spool.registry" not in shown.stdout, shown.stdout


FAST = ("--lease-seconds", "2", "--poll-seconds", "0.2")


def test_requeue_of_a_child_skipped_under_a_dead_parent_refuses_and_with_parents_runs_the_chain(
    procs: Procs, spool_dir: Path, sp: Spool
) -> None:
    """A -> B -> C where A fails its one try: the coordinator skips B, then C. Requeueing C alone
    would be skipped again at once, so it is refused with the parent to requeue; --with-parents
    requeues A, B and C and the chain ends done (A passes its second attempt)."""
    a = sp.submit("fail_until", {"attempt": 2}, max_tries=1)
    b = sp.submit("echo", depends_on=[a])
    c = sp.submit("echo", depends_on=[b])
    procs.start(*FAST, "coordinator", name="coordinator")
    procs.start(*FAST, "worker", "--import", "examples.tasks", name="worker")
    wait_until(lambda: sp.status(c)["reason"] == "skipped", timeout=30, message="C skipped")
    assert [sp.status(one)["reason"] for one in (a, b)] == ["failed", "skipped"]

    refused = run_spool("requeue", c, spool=spool_dir)
    assert refused.returncode == 1 and refused.stdout == "", refused
    assert refused.stderr == (
        f"spool: job {c} was skipped because its parent {b} is dead: requeue {b} (or requeue {c} --with-parents)\n"
    )
    assert sp.status(c)["state"] == "dead"

    chained = run_spool("requeue", c, "--with-parents", spool=spool_dir)
    assert chained.returncode == 0, chained
    assert chained.stdout.split() == [a, "requeued", b, "requeued", c, "requeued"]
    wait_until(lambda: sp.status(c)["state"] == "done", timeout=30, message="the chain done")
    assert [sp.status(one)["state"] for one in (a, b)] == ["done", "done"]


def test_schedule_list_shows_next_in_utc_and_on_the_zones_wall_clock(spool_in: Run) -> None:
    assert spool_in("schedule", "add", "standup", "--cron", "30 9 * * *", "--tz", "Asia/Kolkata", "echo").code == 0
    assert spool_in("schedule", "add", "tick", "--every", "5m", "echo").code == 0
    views = {v["name"]: v for v in json.loads(spool_in("schedule", "list", "--json").out)}
    standup = views["standup"]
    assert standup["next"].endswith("T04:00:00.000Z") and standup["tz"] == "Asia/Kolkata"
    assert standup["next_local"] == standup["next"][:10] + "T09:30:00+05:30"
    assert views["tick"]["next_local"] is None and views["tick"]["tz"] == "UTC"
    rows = {line.split()[0]: line for line in spool_in("schedule", "list").out.splitlines()[1:]}
    assert f"{standup['next']}  {standup['next'][:10]} 09:30:00 IST" in rows["standup"], rows
