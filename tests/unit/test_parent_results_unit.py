"""Parents' results in-process: the cap's error names the biggest parents, the shell job's file is
private and gone after, a symlinked scratch folder is refused, and a remote lease's
``parent_results`` is checked as input from the network (absent from an older server: ``{}``)."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pytest

from spool import Spool
from spool.job import Job
from spool.registry import Current
from spool.runner.attempt.parents import ParentResultsError, parent_results, parents_file
from spool.runner.remote.lease import Refused, RemoteLease


def _lease(**extra: Any) -> dict[str, Any]:
    lease = {"id": "job-1", "attempt": 1, "fence": "1-abc", "task": "echo", "args": {}}
    lease.update(timeout_seconds=30, tries_left=2, heartbeat_seconds=1.0, **extra)
    return {"lease": lease}


def test_a_remote_lease_carries_the_parents_results_checked() -> None:
    assert RemoteLease.from_reply(_lease()).parent_results == {}  # an older server says nothing
    assert RemoteLease.from_reply(_lease(parent_results={"p-1": {"n": 1}})).parent_results == {"p-1": {"n": 1}}
    with pytest.raises(Refused, match="parents that are no job ids"):
        RemoteLease.from_reply(_lease(parent_results={"../done/x": 1}))
    with pytest.raises(Refused, match="parent_results as an object"):
        RemoteLease.from_reply(_lease(parent_results=[1]))


def test_over_the_cap_the_error_names_the_biggest_parents_and_counts_the_rest(tmp_path: Path) -> None:
    root = tmp_path / "spool"
    Spool.init(root, environ={}).close()
    (root / "config.yaml").write_text("max_parent_results_bytes: 50\n")
    with Spool(root, environ={}) as sp:
        ids = [f"p{n}" for n in range(7)]
        for n, job_id in enumerate(ids):
            (root / "results" / f"{job_id}.json").write_text('"' + "x" * (10 + n) + '"')
        with pytest.raises(ParentResultsError) as refused:
            parent_results(sp, Job(id="c", key="c", task="echo", args={}, depends_on=tuple(ids)))
    message = str(refused.value)
    assert refused.value.reject
    assert message.startswith("parents' results are 105 bytes in all, over max_parent_results_bytes (50): ")
    assert "p6 18 bytes, p5 17 bytes, p4 16 bytes, p3 15 bytes, p2 14 bytes and 2 more parents;" in message


def test_the_shell_jobs_file_is_private_and_removed_after(tmp_path: Path) -> None:
    with parents_file({"p-1": {"n": 1}}, str(tmp_path)) as path:
        assert Path(path).read_text() == '{"p-1":{"n":1}}'
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        assert Path(path).name.startswith(f"{os.getpid()}-")  # the tmp sweep's writer pid
    assert not Path(path).exists()
    (tmp_path / "link").symlink_to(tmp_path)
    with pytest.raises(OSError), parents_file({}, str(tmp_path / "link")):
        pass


def test_parent_results_is_a_fresh_copy_and_stays_out_of_the_fields() -> None:
    now = Current("j", 1, 0, 0.0).with_parent_results({"p": {"n": [1]}})
    got = now.parent_results()
    got["p"]["n"].append(2)  # type: ignore[index]
    assert now.parent_results() == {"p": {"n": [1]}}
    assert Current("j", 1, 0, 0.0).parent_results() == {}
    assert "parent" not in repr(now)
