"""Parents' results on a local worker, with real processes: a Python child of two parents sees
both results, a shell child reads them from the file ``SPOOL_PARENT_RESULTS`` names (in the
spool's tmp/, gone after the attempt), a job without parents gets ``{}``, and a mapping that can
never be handed over (over ``max_parent_results_bytes``, a parent's result purged) ends the
child rejected at its first attempt, its error naming the parents."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from crashkit import Kit
from support import ROOT, run_spool

PARENT_TASKS = ("--import", "parent_tasks")  # tests/parent_tasks.py


@pytest.fixture(autouse=True)
def _parent_tasks_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT / "tests"), os.environ["PYTHONPATH"]]))


def _result(kit: Kit, job_id: str) -> object:
    kit.wait_state(job_id, "done")
    return kit.sp.result(job_id)


def test_a_python_child_sees_both_parents_results_and_a_job_without_parents_sees_none(kit: Kit) -> None:
    first = kit.sp.submit("echo", {"n": 1})
    second = kit.sp.submit("echo", {"word": "two"})
    child = kit.sp.submit("parents", depends_on=[first, second])
    orphan = kit.sp.submit("parents")
    kit.coordinator()
    kit.worker("w1", extra=PARENT_TASKS)
    parents = {first: _result(kit, first), second: _result(kit, second)}
    assert _result(kit, child) == {"parents": parents, "fresh_copy": True}
    assert _result(kit, orphan) == {"parents": {}, "fresh_copy": True}
    kit.fsck_ok()


def test_a_shell_child_reads_its_parents_results_from_the_file_named_in_its_environment(kit: Kit) -> None:
    parent = kit.sp.submit("echo", {"n": 1})
    script = 'echo "$SPOOL_PARENT_RESULTS"; cat "$SPOOL_PARENT_RESULTS"'
    child = kit.sp.submit("shell", {"argv": ["sh", "-c", script]}, depends_on=[parent])
    orphan = kit.sp.submit("shell", {"argv": ["sh", "-c", script]})
    kit.coordinator()
    kit.worker("w1", extra=("--allow-shell",))
    for job_id, expected in ((child, {parent: _result(kit, parent)}), (orphan, {})):
        result = _result(kit, job_id)
        assert isinstance(result, dict) and result["exit"] == 0, result
        path, text = result["output"].split("\n", 1)
        assert json.loads(text) == expected
        assert Path(path).parent == kit.spool_dir / "tmp"  # swept by the coordinator if we die
        assert not Path(path).exists()  # removed when the command ended
    kit.fsck_ok()


def test_parents_results_over_the_cap_end_the_child_rejected_naming_them(kit: Kit) -> None:
    big = kit.sp.submit("echo", {"text": "x" * 300})
    small = kit.sp.submit("echo", {"text": "y" * 100})
    child = kit.sp.submit("parents", depends_on=[big, small], max_tries=3)
    kit.coordinator()
    kit.worker("w1", extra=PARENT_TASKS, env={"SPOOL_MAX_PARENT_RESULTS_BYTES": "400"})
    status = kit.wait_state(child, "dead")
    sizes = {job_id: (kit.spool_dir / "results" / f"{job_id}.json").stat().st_size for job_id in (big, small)}
    total = sum(sizes.values())
    assert total > 400
    error = status["error"]
    assert f"parents' results are {total:,} bytes in all, over max_parent_results_bytes (400)" in error, error
    assert f"{big} {sizes[big]:,} bytes, {small} {sizes[small]:,} bytes;" in error, error  # the biggest first
    assert [(a["attempt"], a["outcome"]) for a in status["attempts"]] == [(1, "rejected")]  # never retried
    kit.fsck_ok()


def test_a_parent_purged_before_its_child_ran_ends_the_child_rejected_naming_it(kit: Kit) -> None:
    parent = kit.sp.submit("echo", {"n": 1})
    assert run_spool("worker", "--burst", "--import", "examples.tasks", spool=kit.spool_dir).returncode == 0
    kit.wait_state(parent, "done")
    child = kit.sp.submit("parents", depends_on=[parent], max_tries=3)  # ready at once: its parent is done
    purged = run_spool("purge", "--older-than", "0s", "--state", "done", spool=kit.spool_dir)
    assert purged.returncode == 0, purged.stderr
    assert kit.sp.state(parent) is None
    kit.coordinator()
    kit.worker("w1", extra=PARENT_TASKS)
    status = kit.wait_state(child, "dead")
    assert f"parent {parent} has no result" in status["error"], status
    assert [(a["attempt"], a["outcome"]) for a in status["attempts"]] == [(1, "rejected")]
    kit.fsck_ok()


def test_a_spool_renamed_while_the_worker_runs_still_gets_its_shell_jobs_their_file(kit: Kit, tmp_path: Path) -> None:
    kit.wait_logged(kit.coordinator(), "coordinator started")
    worker = kit.worker("w1", extra=("--allow-shell",))
    parent = kit.sp.submit("echo", {"n": 1})
    expected = {parent: _result(kit, parent)}
    moved = tmp_path / "renamed-spool"
    os.rename(kit.spool_dir, moved)
    script = 'echo "$SPOOL_PARENT_RESULTS"; cat "$SPOOL_PARENT_RESULTS"'
    child = kit.sp.submit("shell", {"argv": ["sh", "-c", script]}, depends_on=[parent])  # through its fds
    kit.spool_dir = moved
    result = _result(kit, child)
    assert isinstance(result, dict) and result["exit"] == 0, result
    path, text = result["output"].split("\n", 1)
    assert json.loads(text) == expected and Path(path).parent == moved / "tmp"
    assert worker.poll() is None
