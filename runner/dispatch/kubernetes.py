"""The ``kubernetes`` engine: each engine job is a Kubernetes Job (``batch/v1``) whose one pod runs
``spool run-one``, through the official client (``pip install 'spool-queue[kubernetes]'``).

    spool dispatch --server URL --token-file F --engine kubernetes \\
        --engine-opt image=registry.example.org/myapp:1.4 --engine-opt namespace=jobs

A Job re-runs its pod on failure (``backoffLimit`` 6 by default) and "the same program may
sometimes be started twice", so every Job is made with ``backoffLimit: 0``, ``restartPolicy:
Never`` and a ``podFailurePolicy`` that fails the Job on any non-zero exit and on a disruption
(an eviction or a node drain, which would not count against ``backoffLimit`` otherwise):
spool's tries are the only tries, and a failed Job is a definitive verdict the dispatcher
fences the runner on. ``activeDeadlineSeconds`` (``--engine-opt deadline_seconds``, default
``default_timeout_seconds`` + ``grace_seconds``) ends a pod that outlives any attempt;
``ttlSecondsAfterFinished`` (an hour) lets Kubernetes clean up.

Labels name the Job's dispatcher (``spool.dev/dispatcher``), runner and spool job, so a
dispatcher SIGKILLed and started again lists its Jobs and adopts the ones not over. Verdicts,
from the Job's status: a ``Complete`` condition or ``succeeded`` -> ``SUCCEEDED``; a ``Failed``
condition or ``failed`` -> ``FAILED``; ``ready`` pods -> ``RUNNING``; otherwise (not scheduled,
pulling its image) -> ``PENDING``; a Job that is gone -> ``LOST``.

The token reaches ``run-one`` in a Secret mounted at ``/var/run/spool/token``: the engine writes
it to Secret ``spool-dispatch-<label>`` (``--engine-opt token_secret=NAME`` uses one of yours
instead). The image must hold spool and the task modules; ``--engine-opt cacert=PATH`` names the
server's CA inside the image. The client is configured from ``--engine-opt kubeconfig=PATH``, else
the in-cluster service account, else ``~/.kube/config``.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import time
from collections.abc import Mapping
from typing import Any

from spool.base.errors import UsageError
from spool.runner.dispatch.engine import EngineJob, RunOne, Verdict
from spool.workers import WORKER_NAME

log = logging.getLogger("spool.dispatch")

OPTIONS = ("image", "namespace", "kubeconfig", "token_secret", "cacert", "deadline_seconds", "label")
TOKEN_DIR = "/var/run/spool"
LABEL_DISPATCHER, LABEL_RUNNER, LABEL_JOB = "spool.dev/dispatcher", "spool.dev/runner", "spool.dev/job"
TTL_SECONDS = 3600


def open_engine(run_one: RunOne, token: str, label: str, options: Mapping[str, str]) -> KubernetesEngine:
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise UsageError(f"--engine-opt {unknown[0]}: the kubernetes engine takes {', '.join(OPTIONS)}")
    if not options.get("image"):
        raise UsageError("the kubernetes engine needs --engine-opt image=IMAGE (an image with spool and your tasks)")
    try:
        deadline = int(options.get("deadline_seconds") or 3600 + 30)
    except ValueError:
        raise UsageError("--engine-opt deadline_seconds: expected whole seconds") from None
    try:
        from kubernetes import client, config
    except ImportError:
        raise UsageError("the kubernetes engine needs its client: pip install 'spool-queue[kubernetes]'") from None
    try:
        if options.get("kubeconfig"):
            api = config.new_client_from_config(config_file=options["kubeconfig"])
        else:
            try:
                config.load_incluster_config()
            except config.ConfigException:
                config.load_kube_config()
            api = client.ApiClient()
    except Exception as err:  # the client raises its own kinds for a missing or broken config
        raise UsageError(f"kubernetes: no usable configuration ({err})") from None
    engine = KubernetesEngine(api, run_one, label, options.get("namespace") or "default", options, deadline)
    engine.secret = options.get("token_secret") or engine.put_token(token)
    return engine


def job_name(label: str, runner: str) -> str:
    """A Job's name: DNS-1123 (lower case, digits, '-', at most 63), unique per label and runner."""
    return "spool-" + hashlib.sha256(f"{label}\0{runner}".encode()).hexdigest()[:20]


class KubernetesEngine:
    def __init__(
        self, api: Any, run_one: RunOne, label: str, namespace: str, options: Mapping[str, str], deadline: int
    ) -> None:
        from kubernetes import client

        self.api, self.run_one, self.label, self.namespace = api, run_one, label, namespace
        self.batch, self.core = client.BatchV1Api(api), client.CoreV1Api(api)
        self.image, self.cacert, self.deadline = options["image"], options.get("cacert"), deadline
        self.secret = ""

    def put_token(self, token: str) -> str:
        """Secret ``spool-dispatch-<label>`` holding the token (made, or replaced when it exists)."""
        from kubernetes.client.exceptions import ApiException

        name = f"spool-dispatch-{self.label}".lower()
        body: Any = {  # plain data: the client takes it as it takes its models
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "labels": {LABEL_DISPATCHER: self.label}},
            "type": "Opaque",
            "data": {"token": base64.b64encode(token.encode()).decode()},
        }
        try:
            self.core.create_namespaced_secret(self.namespace, body)
        except ApiException as err:
            if err.status != 409:
                raise UsageError(f"kubernetes: the token's Secret {name}: {err.reason}") from None
            self.core.replace_namespaced_secret(name, self.namespace, body)
        return name

    def manifest(self, runner: str, job_id: str) -> dict[str, Any]:
        """The Job for one engine job: retries off, a deadline, labels to adopt it by."""
        argv = ["spool", "run-one", "--server", self.run_one.server, "--token-file", f"{TOKEN_DIR}/token"]
        argv += ["--runner", runner, "--job", job_id]
        argv += ["--cacert", self.cacert] if self.cacert else []
        argv += [arg for module in self.run_one.import_modules for arg in ("--import", module)]
        labels = {LABEL_DISPATCHER: self.label, LABEL_RUNNER: runner, LABEL_JOB: job_id}
        env = [{"name": name, "value": value} for name, value in sorted(self.run_one.env.items())]
        return {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": job_name(self.label, runner), "labels": labels},
            "spec": {
                "backoffLimit": 0,
                "activeDeadlineSeconds": self.deadline,
                "ttlSecondsAfterFinished": TTL_SECONDS,
                "podFailurePolicy": {
                    "rules": [
                        {"action": "FailJob", "onExitCodes": {"operator": "NotIn", "values": [0]}},
                        {"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget"}]},
                    ]
                },
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [
                            {
                                "name": "run-one",
                                "image": self.image,
                                "command": argv,
                                "env": env,
                                "volumeMounts": [{"name": "token", "mountPath": TOKEN_DIR, "readOnly": True}],
                            }
                        ],
                        "volumes": [{"name": "token", "secret": {"secretName": self.secret, "defaultMode": 0o400}}],
                    },
                },
            },
        }

    # -- the protocol ------------------------------------------------------------------------

    def submit(self, runner: str, job_id: str) -> EngineJob:
        from kubernetes.client.exceptions import ApiException

        name = job_name(self.label, runner)
        manifest: Any = self.manifest(runner, job_id)  # plain data: the client takes it as it takes its models
        try:
            self.batch.create_namespaced_job(self.namespace, manifest)
        except ApiException as err:
            raise UsageError(f"kubernetes: creating Job {name}: {err.status} {err.reason}") from None
        return EngineJob(runner, job_id, time.time(), name)

    def poll(self, job: EngineJob) -> Verdict:
        from kubernetes.client.exceptions import ApiException

        try:
            found = self.batch.read_namespaced_job_status(job.handle, self.namespace)
        except ApiException as err:
            return Verdict.LOST if err.status == 404 else Verdict.RUNNING  # an API hiccup: look again
        return verdict_of(self.api.sanitize_for_serialization(found).get("status") or {})

    def cancel(self, job: EngineJob) -> None:
        from kubernetes.client.exceptions import ApiException

        try:
            self.batch.delete_namespaced_job(job.handle, self.namespace, propagation_policy="Background")
        except ApiException as err:
            if err.status != 404:
                log.warning("kubernetes: deleting Job %s: %s %s", job.handle, err.status, err.reason)

    def forget(self, job: EngineJob) -> None:
        pass  # ttlSecondsAfterFinished cleans up; a failed Job stays an hour for `kubectl logs`

    def adopt(self) -> list[EngineJob]:
        listed = self.batch.list_namespaced_job(self.namespace, label_selector=f"{LABEL_DISPATCHER}={self.label}")
        jobs = []
        for item in self.api.sanitize_for_serialization(listed).get("items", []):
            labels = (item.get("metadata") or {}).get("labels") or {}
            runner, job_id = labels.get(LABEL_RUNNER, ""), labels.get(LABEL_JOB, "")
            if not WORKER_NAME.fullmatch(runner) or not job_id:
                continue
            if verdict_of(item.get("status") or {}) in (Verdict.PENDING, Verdict.RUNNING):
                jobs.append(EngineJob(runner, job_id, time.time(), item["metadata"]["name"]))
        return jobs

    def stop(self) -> None:
        self.api.close()


def verdict_of(status: Mapping[str, Any]) -> Verdict:
    """A Job's status as a verdict (see the module's doc)."""
    conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or [] if isinstance(c, dict)}
    if conditions.get("Failed") == "True" or (status.get("failed") or 0) > 0:
        return Verdict.FAILED
    if conditions.get("Complete") == "True" or (status.get("succeeded") or 0) > 0:
        return Verdict.SUCCEEDED
    if (status.get("ready") or 0) > 0:
        return Verdict.RUNNING
    return Verdict.PENDING
