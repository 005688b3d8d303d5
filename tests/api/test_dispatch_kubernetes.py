"""``spool dispatch --engine kubernetes`` through the official client against a stub of the
Kubernetes API (tests/api/kube_stub.py, whose "kubelet" runs each Job's container as a local
process) and a real ``spool serve``: the Jobs are made as issue 21 says (``backoffLimit: 0``,
``restartPolicy: Never``, a ``podFailurePolicy``, ``activeDeadlineSeconds``, labels naming the
dispatcher, runner and spool job, the token from a Secret), the queue drains with one result per
job, a Job whose pod is lost is fenced at once and the job runs in a new Job, and a dispatcher
SIGKILLed and started again adopts its Jobs by label. Skipped without the client (the
``kubernetes`` extra)."""

from __future__ import annotations

import base64
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kube_stub import KubeStub
from dispatch_support import Runs, all_done, status_of, submit_jobs

from support import wait_until

pytest.importorskip("kubernetes")


@pytest.fixture
def stub(tmp_path: Path) -> Iterator[KubeStub]:
    made = KubeStub(tmp_path)
    try:
        yield made
    finally:
        made.stop()


def dispatcher(runs: Runs, stub: KubeStub, *extra: str) -> Any:
    args = ["dispatch", *runs._remote(), "--engine", "kubernetes", "--engine-opt", "image=spool:test"]
    args += ["--engine-opt", f"kubeconfig={stub.kubeconfig()}", "--engine-opt", "namespace=jobs"]
    args += ["--engine-opt", f"cacert={runs.served.cacert}"]
    return runs.start("dispatch", *args, "--import", "examples.tasks", *extra)


def test_jobs_are_made_with_retries_off_and_the_queue_drains_one_result_each(
    served: Any, runs: Runs, stub: KubeStub
) -> None:
    runs.coordinator()
    job_ids = submit_jobs(served, "echo", {"n": 1}, n=4)
    dispatcher(runs, stub, "--max-inflight", "2")
    wait_until(lambda: all_done(served, job_ids), 120, message="every job done through Kubernetes Jobs")
    for job_id in job_ids:
        assert [a["outcome"] for a in status_of(served, job_id)["attempts"]] == ["done"]
    assert len(stub.made) == 4
    for manifest in stub.made:
        spec, pod = manifest["spec"], manifest["spec"]["template"]["spec"]
        assert spec["backoffLimit"] == 0 and pod["restartPolicy"] == "Never"
        assert spec["activeDeadlineSeconds"] > 0 and spec["ttlSecondsAfterFinished"] > 0
        rules = spec["podFailurePolicy"]["rules"]
        assert {"action": "FailJob", "onExitCodes": {"operator": "NotIn", "values": [0]}} in rules
        assert {"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget"}]} in rules
        labels = manifest["metadata"]["labels"]
        assert set(labels) == {"spool.dev/dispatcher", "spool.dev/runner", "spool.dev/job"}
        assert labels["spool.dev/job"] in job_ids and pod["containers"][0]["image"] == "spool:test"
        command = pod["containers"][0]["command"]
        assert command[:2] == ["spool", "run-one"] and "--job" in command and "--runner" in command
        assert runs.token_file.read_text().strip() not in str(manifest)  # the token is in a Secret only
    (secret,) = stub.secrets.values()
    assert base64.b64decode(secret["data"]["token"]).decode() == runs.token_file.read_text().strip()


def test_a_job_whose_pod_is_lost_is_fenced_at_once_and_runs_in_a_new_job(
    served: Any, runs: Runs, stub: KubeStub
) -> None:
    # A term far past the test's deadlines, so only the fence can end the dead pod's lease in
    # time. The pod is failed only once its runner logged the lease: the job's file is in leased/
    # from the claim's rename on, before the server hands the lease over, and a pod killed in that
    # window never gets it: the server gives the claim back (attempt "released", no try spent),
    # the fence finds nothing, and the first attempt is never the fenced one (two .ci/runs,
    # 2026-12-05 and 06; reproduced with a 7 s sleep after the claim's rename).
    runs.coordinator(lease_seconds="120.0")
    (job_id,) = submit_jobs(served, "sleep", {"seconds": 60.0})
    dispatcher(runs, stub, "--max-inflight", "1")
    wait_until(lambda: status_of(served, job_id)["state"] == "leased", 60, message="the job leased through a Job")
    wait_until(lambda: f"lease {job_id} attempt=1" in stub.pod_log(job_id), 60, message="the runner holding the lease")
    (first,) = stub.job_of(job_id)
    stub.fail(first["metadata"]["name"])  # the node is gone: the Job Failed
    wait_until(lambda: _first_attempt_fenced(served, job_id), 60, message="the runner fenced at once")
    # and the dispatcher says so, either way ("<ids> back to the queue", or "it held no lease")
    wait_until(lambda: "fenced: " in runs.log("dispatch"), 60, message="the fence in the dispatcher's log")
    wait_until(lambda: len(stub.job_of(job_id)) == 2, 60, message="a new Job for the job")
    wait_until(lambda: len(status_of(served, job_id)["attempts"]) == 2, 60, message="its second attempt")
    first_attempt = status_of(served, job_id)["attempts"][0]
    assert first_attempt["outcome"] == "expired" and "fenced" in (first_attempt["error"] or ""), first_attempt
    assert not (served.root / "results" / f"{job_id}.json").exists()


def _first_attempt_fenced(served: Any, job_id: str) -> bool:
    attempts = status_of(served, job_id)["attempts"]
    return bool(attempts) and attempts[0]["outcome"] == "expired" and "fenced" in (attempts[0]["error"] or "")


def test_a_dispatcher_killed_and_started_again_adopts_its_jobs_by_label(
    served: Any, runs: Runs, stub: KubeStub
) -> None:
    runs.coordinator(lease_seconds="15.0")  # one attempt even when a loaded machine delays its beats
    (job_id,) = submit_jobs(served, "sleep", {"seconds": 3.0})
    first = dispatcher(runs, stub, "--max-inflight", "1")
    wait_until(lambda: status_of(served, job_id)["state"] == "leased", 60, message="the job leased through a Job")
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    dispatcher(runs, stub, "--max-inflight", "1")
    wait_until(lambda: "adopted engine job" in runs.log("dispatch"), 60, message="the Job adopted")
    wait_until(lambda: all_done(served, [job_id]), 60, message="the job done by its one attempt")
    assert [a["outcome"] for a in status_of(served, job_id)["attempts"]] == ["done"]
    assert len(stub.job_of(job_id)) == 1  # adopted, never made twice
    wait_until(lambda: "ended" in runs.log("dispatch").split("adopted engine job")[-1], 30, message="seen over")
