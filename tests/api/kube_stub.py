"""A stub of the Kubernetes API for the ``kubernetes`` engine's tests (k3s and kind download
images, which these machines cannot): the few ``batch/v1`` Job and ``v1`` Secret calls the engine
makes, over plain HTTP on loopback, with a tiny "kubelet" that runs each Job's one container as a
local process (``spool`` in its command becomes this interpreter's ``python -m spool.cli``, and the
mounted Secret a local file). It keeps every manifest it was given, so a test checks them.

Not Kubernetes: no scheduling, no images, one pod per Job, no retries ever (the engine asks for
none). ``fail(name)`` ends a Job's pod the way a lost node does (killed, the Job ``Failed``).
"""

from __future__ import annotations

import base64
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from support import ROOT

TOKEN_DIR = "/var/run/spool"


class KubeStub:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.jobs: dict[str, dict[str, Any]] = {}  # name -> manifest (as given, plus status)
        self.pods: dict[str, subprocess.Popen[bytes]] = {}
        self.secrets: dict[str, dict[str, Any]] = {}
        self.made: list[dict[str, Any]] = []  # every Job manifest ever created, in order
        self._lock = threading.Lock()
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = int(sock.getsockname()[1])
        app = Starlette(
            routes=[
                Route("/api/v1/namespaces/{ns}/secrets", self._secret_create, methods=["POST"]),
                Route("/api/v1/namespaces/{ns}/secrets/{name}", self._secret_replace, methods=["PUT"]),
                Route("/apis/batch/v1/namespaces/{ns}/jobs", self._job_create, methods=["POST"]),
                Route("/apis/batch/v1/namespaces/{ns}/jobs", self._job_list, methods=["GET"]),
                Route("/apis/batch/v1/namespaces/{ns}/jobs/{name}/status", self._job_read, methods=["GET"]),
                Route("/apis/batch/v1/namespaces/{ns}/jobs/{name}", self._job_read, methods=["GET"]),
                Route("/apis/batch/v1/namespaces/{ns}/jobs/{name}", self._job_delete, methods=["DELETE"]),
            ]
        )
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("the Kubernetes stub did not start")
            time.sleep(0.02)

    def kubeconfig(self) -> Path:
        path = self.tmp / "kubeconfig"
        path.write_text(
            "apiVersion: v1\nkind: Config\ncurrent-context: stub\n"
            f"clusters: [{{name: stub, cluster: {{server: 'http://127.0.0.1:{self.port}'}}}}]\n"
            "users: [{name: stub, user: {token: stub-token}}]\n"
            "contexts: [{name: stub, context: {cluster: stub, user: stub}}]\n"
        )
        return path

    def stop(self) -> None:
        for pod in self.pods.values():
            _kill(pod)
        self.server.should_exit = True
        self.thread.join(timeout=10)

    # -- what a test does ----------------------------------------------------------------------

    def fail(self, name: str) -> None:
        """The pod lost with its node: killed, the Job Failed (a disruption)."""
        with self._lock:
            pod = self.pods.get(name)
            if pod is not None:
                _kill(pod)
            self.jobs[name]["status"] = _status(failed=True, reason="PodFailurePolicy")

    def job_of(self, spool_job: str) -> list[dict[str, Any]]:
        return [m for m in self.made if m["metadata"]["labels"].get("spool.dev/job") == spool_job]

    def pod_log(self, spool_job: str) -> str:
        """What the pods of ``spool_job``'s Jobs printed, oldest first."""
        names = [m["metadata"]["name"] for m in self.job_of(spool_job)]
        return "".join((self.tmp / f"{name}.log").read_text() for name in names if (self.tmp / f"{name}.log").exists())

    # -- the API -------------------------------------------------------------------------------

    async def _secret_create(self, request: Request) -> JSONResponse:
        body = await request.json()
        name = body["metadata"]["name"]
        if name in self.secrets:
            return JSONResponse({"kind": "Status", "code": 409, "reason": "AlreadyExists"}, status_code=409)
        self.secrets[name] = body
        return JSONResponse(body, status_code=201)

    async def _secret_replace(self, request: Request) -> JSONResponse:
        body = await request.json()
        self.secrets[request.path_params["name"]] = body
        return JSONResponse(body)

    async def _job_create(self, request: Request) -> JSONResponse:
        body = await request.json()
        name = body["metadata"]["name"]
        with self._lock:
            if name in self.jobs:
                return JSONResponse({"kind": "Status", "code": 409, "reason": "AlreadyExists"}, status_code=409)
            self.made.append(body)
            self.jobs[name] = {**body, "status": _status(ready=True)}
            self.pods[name] = self._run_pod(name, body)
        return JSONResponse(self.jobs[name], status_code=201)

    async def _job_list(self, request: Request) -> JSONResponse:
        key, _, value = request.query_params.get("labelSelector", "").partition("=")
        with self._lock:
            self._settle()
            items = [job for job in self.jobs.values() if job["metadata"]["labels"].get(key) == value]
        return JSONResponse({"apiVersion": "batch/v1", "kind": "JobList", "metadata": {}, "items": items})

    async def _job_read(self, request: Request) -> JSONResponse:
        name = request.path_params["name"]
        with self._lock:
            self._settle()
            job = self.jobs.get(name)
        if job is None:
            return JSONResponse({"kind": "Status", "code": 404, "reason": "NotFound"}, status_code=404)
        return JSONResponse(job)

    async def _job_delete(self, request: Request) -> JSONResponse:
        name = request.path_params["name"]
        with self._lock:
            job = self.jobs.pop(name, None)
            pod = self.pods.pop(name, None)
        if pod is not None:
            _kill(pod)
        if job is None:
            return JSONResponse({"kind": "Status", "code": 404, "reason": "NotFound"}, status_code=404)
        return JSONResponse({"kind": "Status", "status": "Success"})

    # -- the "kubelet" -------------------------------------------------------------------------

    def _run_pod(self, name: str, job: dict[str, Any]) -> subprocess.Popen[bytes]:
        pod = job["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        secret_name = pod["volumes"][0]["secret"]["secretName"]
        token = base64.b64decode(self.secrets[secret_name]["data"]["token"])
        mounted = self.tmp / f"{name}.token"
        mounted.write_bytes(token)
        mounted.chmod(0o400)
        argv = [str(mounted) if arg == f"{TOKEN_DIR}/token" else arg for arg in container["command"]]
        if argv[0] == "spool":
            argv = [sys.executable, "-m", "spool.cli", *argv[1:]]
        env = {**os.environ, **{item["name"]: item["value"] for item in container.get("env", [])}}
        with open(self.tmp / f"{name}.log", "ab") as log:
            return subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT, start_new_session=True
            )

    def _settle(self) -> None:
        """Each pod that exited makes its Job Complete or Failed (caller holds the lock)."""
        for name, pod in self.pods.items():
            code = pod.poll()
            job = self.jobs.get(name)
            if code is None or job is None or job["status"].get("conditions"):
                continue
            job["status"] = _status(succeeded=True) if code == 0 else _status(failed=True, reason="PodFailurePolicy")


def _status(*, ready: bool = False, succeeded: bool = False, failed: bool = False, reason: str = "") -> dict[str, Any]:
    if succeeded:
        return {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}
    if failed:
        return {"failed": 1, "conditions": [{"type": "Failed", "status": "True", "reason": reason}]}
    return {"active": 1, "ready": 1 if ready else 0}


def _kill(pod: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(pod.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    pod.wait()
