"""What the dispatch tests share: ``Runs`` (the processes a test starts: ``run-one``, ``spool
dispatch --engine local``, a coordinator; SIGKILLed at teardown with the local engine's children)
and small reads of a served spool. The ``runs`` fixture is in conftest.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

from spool import Spool
from support import ROOT, SPOOL_CMD, kill_groups, wait_until

LEASE_SECONDS = "1.5"


class Runs:
    """The processes a test starts (each in a session of its own), and the local engine's
    subprocesses (read from its state folder), all SIGKILLed at the end."""

    def __init__(self, served: Any, tmp: Path) -> None:
        self.served, self.logs, self.state = served, tmp / "logs", tmp / "engine"
        self.logs.mkdir()
        self.started: list[subprocess.Popen[bytes]] = []
        self.token_file = tmp / "dispatch.token"
        self.token_file.write_text(served.token("d1", "dispatch"))
        self.token_file.chmod(0o600)
        self._runs: dict[str, int] = {}

    def start(self, name: str, *args: str) -> subprocess.Popen[bytes]:
        self._runs[name] = self._runs.get(name, 0) + 1
        with open(self.logs / f"{name}.log", "ab") as log:
            proc = subprocess.Popen(
                [*SPOOL_CMD, *args], stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=True
            )
        self.started.append(proc)
        return proc

    def _remote(self) -> list[str]:
        return ["--server", self.served.url, "--token-file", str(self.token_file), "--cacert", str(self.served.cacert)]

    def run_one(self, runner: str, job_id: str, claim_patience: str = "60") -> subprocess.Popen[bytes]:
        """``spool run-one`` for ``job_id``; ``claim_patience``: how long its claim may go unanswered."""
        patience = ["--claim-patience-seconds", claim_patience]
        return self.start(
            runner,
            *patience,
            "run-one",
            *self._remote(),
            "--runner",
            runner,
            "--job",
            job_id,
            "--import",
            "examples.tasks",
        )

    def dispatcher(self, *extra: str) -> subprocess.Popen[bytes]:
        args = ["dispatch", *self._remote(), "--engine", "local", "--engine-opt", f"state_dir={self.state}"]
        return self.start("dispatch", *args, "--import", "examples.tasks", *extra)

    def coordinator(self, lease_seconds: str = LEASE_SECONDS) -> subprocess.Popen[bytes]:
        root = str(self.served.root)
        proc = self.start(
            "coordinator",
            "--spool",
            root,
            "--lease-seconds",
            lease_seconds,
            "--backoff-base-seconds",
            "0.1",
            "coordinator",
        )
        wait_until(lambda: meta_of(self.served, "lease_seconds") == lease_seconds, 30, message="the term published")
        return proc

    def log(self, name: str) -> str:
        path = self.logs / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def engine_records(self) -> list[dict[str, Any]]:
        if not self.state.exists():
            return []
        return [json.loads(path.read_text()) for path in sorted(self.state.glob("*.json"))]

    def kill_all(self) -> None:
        kill_groups(self.started)
        for record in self.engine_records():
            if record.get("pid"):
                try:
                    os.killpg(int(record["pid"]), signal.SIGKILL)
                except ProcessLookupError:
                    pass


def meta_of(served: Any, name: str) -> str | None:
    with Spool(served.root, environ={}) as sp:
        value = sp.ledger.meta(name)
    return None if value is None else str(float(value))


def status_of(served: Any, job_id: str) -> dict[str, Any]:
    with Spool(served.root, environ={}) as sp:
        return sp.status(job_id)


def all_done(served: Any, job_ids: list[str]) -> bool:
    return all((served.root / "done" / f"{job_id}.yaml").exists() for job_id in job_ids)


def submit_jobs(served: Any, task: str, args: dict[str, Any], n: int = 1, **options: Any) -> list[str]:
    with Spool(served.root, environ={}) as sp:
        return [sp.submit(task, args, **options) for _ in range(n)]
