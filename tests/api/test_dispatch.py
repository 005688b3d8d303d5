"""``spool run-one`` and ``spool dispatch --engine local`` as real processes against a real
``spool serve`` (``served``): the claim at start is the fence, a dispatcher drains the queue with
one result per job, a dead runner is fenced or expires, a dispatcher SIGKILLed and started again
adopts its engine jobs, an engine job that never starts is dispatched again with no try spent,
and a dispatch token acts only for its own runners."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any


from spool import Spool
from spool.disk.layout import State
from spool.moves.store import job_lock
from spool.workers import live_workers, unhandled_ready
from support import wait_until
from dispatch_support import Runs, all_done, status_of, submit_jobs


def test_two_run_ones_for_one_job_run_it_once(served: Any, runs: Runs, tmp_path: Path) -> None:
    ran = tmp_path / "ran.txt"
    [job_id] = submit_jobs(served, "touch", {"path": str(ran)})
    first, second = runs.run_one("r1", job_id), runs.run_one("r2", job_id)
    assert first.wait(60) == 0 and second.wait(60) == 0  # the one that claimed nothing exits 0 too
    assert ran.read_text().count("\n") == 1  # the handler ran once
    status = status_of(served, job_id)
    assert status["state"] == "done" and status["attempt"] == 1
    assert [a["worker"] for a in status["attempts"]] in (["d1/r1"], ["d1/r2"])
    assert sum(f"lease {job_id} attempt=1" in runs.log(r) for r in ("r1", "r2")) == 1


def test_a_dispatcher_over_the_local_engine_drains_the_queue_one_result_each(served: Any, runs: Runs) -> None:
    job_ids = [submit_jobs(served, "echo", {"n": n})[0] for n in range(8)]
    runs.dispatcher("--max-inflight", "3")
    wait_until(lambda: all_done(served, job_ids), 90, message="8 jobs done through the local engine")
    for n, job_id in enumerate(job_ids):
        status = status_of(served, job_id)
        assert status["attempt"] == 1 and len(status["attempts"]) == 1
        assert status["attempts"][0]["worker"].startswith("d1/r-")
        with Spool(served.root, environ={}) as sp:
            assert sp.result(job_id)["args"] == {"n": n}
    wait_until(lambda: not runs.engine_records(), 30, message="every engine job forgotten once over")
    assert sorted(p.name for p in (served.root / "results").iterdir()) == sorted(f"{i}.json" for i in job_ids)


def test_a_run_one_sigkilled_mid_attempt_gives_its_job_back_by_lease_expiry(served: Any, runs: Runs) -> None:
    runs.coordinator()
    [job_id] = submit_jobs(served, "sleep", {"seconds": 2.0})
    first = runs.run_one("r1", job_id)
    wait_until(lambda: f"lease {job_id} attempt=1" in runs.log("r1"), 30, message="run-one r1 running the attempt")
    os.killpg(first.pid, signal.SIGKILL)
    wait_until(lambda: status_of(served, job_id)["state"] == "pending", 30, message="the lease expired")
    assert runs.run_one("r2", job_id).wait(60) == 0
    status = status_of(served, job_id)
    assert status["state"] == "done" and status["attempt"] == 2
    assert [(a["worker"], a["outcome"]) for a in status["attempts"]] == [("d1/r1", "expired"), ("d1/r2", "done")]


def test_a_dispatcher_fences_a_runner_whose_process_died_at_once(served: Any, runs: Runs) -> None:
    """Under a dispatcher, the engine job's death is definitive: the runner is fenced, the job
    retried without waiting out the lease (the term here is the default 30 s)."""
    root = str(served.root)
    runs.start("coordinator", "--spool", root, "--backoff-base-seconds", "0.1", "coordinator")
    [job_id] = submit_jobs(served, "sleep", {"seconds": 2.0})
    runs.dispatcher("--max-inflight", "1")
    [record] = wait_until(lambda: [r for r in runs.engine_records() if r.get("pid")], 30, message="a run-one")
    output = runs.state / f"{record['runner']}.log"
    wait_until(lambda: f"lease {job_id} attempt=1" in output.read_text(), 30, message="run-one running the attempt")
    os.killpg(int(record["pid"]), signal.SIGKILL)  # the engine job's whole group: the wrapper, run-one, its child
    wait_until(lambda: all_done(served, [job_id]), 25, message="the job done by a second runner before the term")
    attempts = status_of(served, job_id)["attempts"]
    assert [a["outcome"] for a in attempts] == ["expired", "done"]
    assert "fenced" in attempts[0]["error"] and attempts[0]["worker"] == f"d1/{record['runner']}"


def test_a_dispatcher_sigkilled_and_restarted_adopts_its_engine_jobs_and_loses_nothing(
    served: Any, runs: Runs, tmp_path: Path
) -> None:
    ran = tmp_path / "ran"
    ran.mkdir()
    job_ids = [submit_jobs(served, "sleep", {"seconds": 1.5})[0] for _ in range(6)]
    first = runs.dispatcher("--max-inflight", "3")
    wait_until(lambda: len([r for r in runs.engine_records() if r.get("pid")]) == 3, 60, message="3 engine jobs")
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    in_flight = {r["runner"] for r in runs.engine_records()}
    runs.dispatcher("--max-inflight", "3")
    wait_until(lambda: all_done(served, job_ids), 90, message="every job done after the restart")
    adopted = {
        line.split("runner ")[1].split(")")[0] for line in runs.log("dispatch").splitlines() if "adopted" in line
    }
    assert in_flight <= adopted
    for job_id in job_ids:
        status = status_of(served, job_id)
        assert status["attempt"] == 1 and [a["outcome"] for a in status["attempts"]] == ["done"]


def test_an_engine_job_not_started_in_time_is_dispatched_again_with_no_try_spent(served: Any, runs: Runs) -> None:
    [job_id] = submit_jobs(served, "echo", {})
    held = runs.dispatcher("--engine-opt", "start_delay=600", "--dispatch-timeout", "0.5")
    wait_until(
        lambda: runs.log("dispatch").count("not started within") >= 2 and runs.engine_records(),
        60,
        message="two engine jobs cancelled, a third one held",
    )
    os.killpg(held.pid, signal.SIGKILL)
    held.wait()
    status = status_of(served, job_id)
    assert status["state"] == "pending" and status["tries"] == 0 and status["attempts"] == []
    assert not list(runs.state.glob("*.log"))  # no run-one ever started
    runs.dispatcher("--dispatch-timeout", "0.5")  # adopts the held one, cancels it, dispatches anew
    wait_until(lambda: all_done(served, [job_id]), 60, message="the job done once engine jobs start")
    assert "adopted engine job" in runs.log("dispatch")
    status = status_of(served, job_id)
    assert status["attempt"] == 1 and status["tries"] == 1


def test_a_dispatch_token_acts_only_for_its_own_runners(served: Any, runs: Runs) -> None:
    d1 = runs.token_file.read_text()
    d2, work = served.token("d2", "dispatch"), served.token("w1", "work")
    first, second = submit_jobs(served, "echo", {}, 2)

    def call(path: str, token: str, body: dict[str, Any]) -> Any:
        return served.call("POST", path, token=token, json=body)

    assert call("/v1/leases", d1, {"tasks": ["echo"]}).status == 422  # a dispatch token names its runner
    assert call("/v1/leases", work, {"tasks": ["echo"], "runner": "r1"}).status == 422
    ready = call("/v1/dispatch/ready", d1, {"tasks": ["echo"], "most": 5})
    assert ready.status == 200 and {item["id"] for item in ready.json["ready"]} == {first, second}
    assert call("/v1/dispatch/ready", work, {}).status == 403
    leased = call("/v1/leases", d1, {"tasks": ["echo"], "runner": "r1", "job": second})
    assert leased.status == 200 and leased.json["lease"]["id"] == second
    assert leased.json["lease"]["worker"] == "d1/r1"
    fence = leased.json["lease"]["fence"]
    for other in (d2, work):  # another dispatch token, a work token: not theirs
        assert call(f"/v1/leases/{second}/heartbeat", other, {"fence": fence}).status == 403
        assert call(f"/v1/leases/{second}/complete", other, {"fence": fence, "result": 1}).status == 403
    assert call("/v1/runners/r1/fence", d2, {}).json == {"runner": "d2/r1", "expired": []}
    assert call("/v1/runners/r1/fence", work, {}).status == 403
    theirs = call("/v1/leases", work, {"tasks": ["echo"]})
    assert theirs.status == 200 and theirs.json["lease"]["id"] == first
    body = {"fence": theirs.json["lease"]["fence"]}
    assert call(f"/v1/leases/{first}/heartbeat", d1, body).status == 403
    assert call(f"/v1/leases/{first}/fail", d1, {**body, "error": "x"}).status == 403
    assert call(f"/v1/leases/{second}/heartbeat", d1, {"fence": fence}).status == 200
    assert call("/v1/runners/r1/fence", d1, {}).json == {"runner": "d1/r1", "expired": [second]}
    late = call(f"/v1/leases/{second}/complete", d1, {"fence": fence, "result": 1})
    assert late.status == 409
    with Spool(served.root, environ={}) as sp:
        assert sp.job(second)[0] is State.PENDING


def test_a_fence_whose_lease_a_move_still_holds_says_so_and_ends_it_when_asked_again(served: Any, runs: Runs) -> None:
    """A move holding the job's lock past the fence's wait (here the test, standing in for a
    claim whose hand-over is slow) answers 503, never 200 with nothing expired: a 200 would let
    the dispatcher forget the runner while its lease waits out the whole term."""
    d1 = runs.token_file.read_text()
    [job_id] = submit_jobs(served, "echo", {})
    leased = served.call("POST", "/v1/leases", token=d1, json={"tasks": ["echo"], "runner": "r1", "job": job_id})
    assert leased.status == 200 and leased.json["lease"]["id"] == job_id
    with Spool(served.root, environ={}) as sp, job_lock(sp, job_id):
        held = served.call("POST", "/v1/runners/r1/fence", token=d1, json={})
        assert held.status == 503 and held.headers["retry-after"] == "1", held
        assert job_id in held.json["error"] and "fence again" in held.json["error"]
        assert sp.job(job_id)[0] is State.LEASED
    again = served.call("POST", "/v1/runners/r1/fence", token=d1, json={})
    assert again.status == 200 and again.json == {"runner": "d1/r1", "expired": [job_id]}
    with Spool(served.root, environ={}) as sp:
        assert sp.job(job_id)[0] is State.PENDING


def test_run_one_and_dispatch_usage_errors_are_one_line(tmp_path: Path) -> None:
    from support import run_spool

    token = tmp_path / "t"
    token.write_text("x")
    for args, says in [
        (["run-one", "--server", "https://h:1", "--token-file", str(token), "--runner", "a/b"], "--runner"),
        (
            ["run-one", "--server", "https://h:1", "--token-file", str(token), "--runner", "a", "--job", "../x"],
            "job id",
        ),
        (["dispatch", "--server", "https://h:1", "--token-file", str(token), "--engine", "ray"], "--engine 'ray'"),
        (
            [
                "dispatch",
                "--server",
                "https://h:1",
                "--token-file",
                str(token),
                "--engine",
                "local",
                "--engine-opt",
                "x",
            ],
            "KEY=VALUE",
        ),
    ]:
        ran = run_spool(*args)
        assert ran.returncode == 2, (args, ran.stderr)
        assert says in ran.stderr and "Traceback" not in ran.stderr


def test_revoking_a_dispatch_token_fences_its_runners_leases(served: Any, runs: Runs) -> None:
    from support import run_spool

    d1 = runs.token_file.read_text()
    [job_id] = submit_jobs(served, "echo", {})
    leased = served.call("POST", "/v1/leases", token=d1, json={"tasks": ["echo"], "runner": "r9"})
    assert leased.status == 200
    ran = run_spool("token", "revoke", "d1", "--json", spool=served.root)
    assert ran.returncode == 0 and json.loads(ran.stdout)["fenced"] == [job_id]
    status = status_of(served, job_id)
    assert status["state"] == "pending" and status["attempts"][0]["outcome"] == "expired"


def test_a_dispatcher_counts_as_a_live_worker_of_its_tasks(served: Any, runs: Runs) -> None:
    """Only engine jobs consume ``echo`` here: the dispatcher asking for ready jobs is recorded as a
    remote worker of its tasks, so nothing warns that no live worker handles them."""
    submit_jobs(served, "echo", {})

    def unhandled() -> dict[str, int]:
        with Spool(served.root, environ={}) as sp:
            return unhandled_ready(sp)

    assert "echo" in unhandled()  # no worker yet
    runs.dispatcher("--engine-opt", "start_delay=600")  # its engine job never starts: the job stays ready
    wait_until(lambda: "echo" not in unhandled(), 30, message="the dispatcher seen as a worker of echo")
    with Spool(served.root, environ={}) as sp:
        assert [w.name for w in live_workers(sp) if w.remote] == ["d1"]
