"""The ``local`` engine: each engine job is a ``spool run-one`` subprocess on the dispatcher's host.

No dependency, for tests and small hosts. Its label is a folder of the dispatcher's own
(``--engine-opt state_dir=DIR``, default ``$XDG_STATE_HOME/spool/dispatch/<label>``, 0700) that
holds one small JSON file per engine job, ``<runner>.json``: the spool job, when it was handed
over, when it may start, and once started its pid and the pid's start time (field 22 of
/proc/PID/stat, so a reused pid is never taken for ours). Each is written whole in a temporary
file, fsync'd and renamed into place, the folder fsync'd, so a dispatcher SIGKILLed at any point
finds every engine job it had (``adopt``). The subprocesses run in sessions of their own: they
outlive a dispatcher that dies, and the next one adopts them.

Each engine job is ``/bin/sh -c '"$@"; echo $? > <runner>.exit'`` around ``spool run-one``, in a
session of its own (its pid is its process group: ``cancel`` kills the group), so its exit status
outlives the dispatcher too. Verdicts: ``SUCCEEDED`` on exit 0; ``FAILED`` on any other status, a
signal included, or when the process is gone without a status (the group SIGKILLed): a dead
process holds no lease worth waiting for, and fencing a runner that completed is a no-op;
``RUNNING`` while the pid still has the start time recorded; ``LOST`` when its state file can't be
read. The output of an engine job that did not succeed stays in ``<runner>.log``.

``--engine-opt start_delay=S`` holds each engine job ``PENDING`` that long before its process
starts, as a busy cluster's queue would (``--dispatch-timeout`` is tested with it). The token
goes to the subprocesses in ``<state_dir>/token`` (0600), never on a command line.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from spool.base.errors import UsageError
from spool.runner.dispatch.engine import EngineJob, RunOne, Verdict
from spool.runner.dispatch.statedir import fsync_dir, state_folder, token_file, write_whole
from spool.workers import WORKER_NAME

log = logging.getLogger("spool.dispatch")

OPTIONS = ("state_dir", "start_delay", "label")
# The files of one engine job in the state folder (not a spool: spool.disk.layout names none of
# them): <runner>.json its record, <runner>.log its output, <runner>.exit its exit status.
RECORD, OUTPUT, STATUS = "json", "log", "exit"
# The wrapper that keeps run-one's exit status in <runner>.exit (staged, then renamed into place).
_WRAPPER = '"$@"; code=$?; echo $code > "$0.tmp" && mv "$0.tmp" "$0"; exit $code'


def open_engine(run_one: RunOne, token: str, label: str, options: Mapping[str, str]) -> LocalEngine:
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise UsageError(f"--engine-opt {unknown[0]}: the local engine takes {', '.join(OPTIONS)}")
    try:
        delay = float(options.get("start_delay", "0"))
    except ValueError:
        raise UsageError(f"--engine-opt start_delay={options['start_delay']}: expected seconds") from None
    if not 0 <= delay <= 86400:
        raise UsageError("--engine-opt start_delay: expected seconds from 0 to 86400")
    folder = state_folder(label, options)
    return LocalEngine(run_one, token_file(folder, token, {}), folder, delay)


class LocalEngine:
    def __init__(self, run_one: RunOne, token_path: str, folder: Path, start_delay: float = 0.0) -> None:
        self.run_one, self.folder, self.start_delay = run_one, folder, start_delay
        self.token_file = token_path
        self._children: dict[str, subprocess.Popen[bytes]] = {}  # runner -> the process we started
        self._succeeded: set[str] = set()  # runners whose log is not worth keeping

    # -- the protocol ------------------------------------------------------------------------

    def submit(self, runner: str, job_id: str) -> EngineJob:
        now = time.time()
        self._save(runner, {"runner": runner, "job": job_id, "submitted": now, "start_at": now + self.start_delay})
        job = EngineJob(runner, job_id, now)
        if self.start_delay <= 0:
            self._start(job)
        return job

    def poll(self, job: EngineJob) -> Verdict:
        child = self._children.get(job.runner)
        if child is not None:
            code = child.poll()
            return Verdict.RUNNING if code is None else self._ended(job, code)
        record = self._load(job.runner)
        if record is None:
            return Verdict.LOST
        pid = record.get("pid")
        if pid is None:
            if time.time() < float(record.get("start_at", 0)):
                return Verdict.PENDING
            self._start(job)
            return Verdict.RUNNING
        if _started_at(int(pid)) == record.get("pid_start"):
            return Verdict.RUNNING
        try:
            code = int(self._file(job.runner, STATUS).read_text())
        except (OSError, ValueError):
            code = -1  # gone with no status: its whole group was killed
        return self._ended(job, code)

    def _ended(self, job: EngineJob, code: int) -> Verdict:
        if code == 0:
            self._succeeded.add(job.runner)
            return Verdict.SUCCEEDED
        return Verdict.FAILED

    def cancel(self, job: EngineJob) -> None:
        child = self._children.get(job.runner)
        record = self._load(job.runner) or {}
        pid = child.pid if child is not None else record.get("pid")
        if pid is not None and (child is not None or _started_at(int(pid)) == record.get("pid_start")):
            try:
                os.killpg(int(pid), signal.SIGKILL)  # the wrapper and run-one, with its attempt child
            except ProcessLookupError:
                pass
        if child is not None:
            child.wait()

    def forget(self, job: EngineJob) -> None:
        self._children.pop(job.runner, None)
        kinds = [RECORD, STATUS]
        if job.runner in self._succeeded:
            self._succeeded.discard(job.runner)
            kinds.append(OUTPUT)
        for kind in kinds:
            try:
                os.unlink(self._file(job.runner, kind))
            except FileNotFoundError:
                pass
        fsync_dir(self.folder)

    def adopt(self) -> list[EngineJob]:
        jobs = []
        for path in sorted(self.folder.iterdir()):
            runner, _, kind = path.name.rpartition(".")
            if kind != RECORD or path.name.startswith("."):
                continue
            record = self._load(runner) if WORKER_NAME.fullmatch(runner) else None
            if record is None or not isinstance(record.get("job"), str):
                log.warning("engine state %s is not one of ours; left alone", path)
                continue
            jobs.append(EngineJob(runner, record["job"], float(record.get("submitted", 0)), str(record.get("pid", ""))))
        return jobs

    def stop(self) -> None:
        self._children.clear()  # the processes run on: the next dispatcher adopts them

    # -- the processes and their files -------------------------------------------------------

    def _start(self, job: EngineJob) -> None:
        run_one = self.run_one.argv(job.runner, job.job_id, self.token_file)
        argv = ["/bin/sh", "-c", _WRAPPER, str(self._file(job.runner, STATUS)), *run_one]
        with open(self._file(job.runner, OUTPUT), "ab") as out:
            child = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=out,
                env={**os.environ, **self.run_one.env},
                start_new_session=True,  # outlives us: the next dispatcher adopts it
            )
        self._children[job.runner] = child
        record = self._load(job.runner) or {"runner": job.runner, "job": job.job_id, "submitted": job.submitted}
        self._save(job.runner, {**record, "pid": child.pid, "pid_start": _started_at(child.pid)})

    def _file(self, runner: str, kind: str) -> Path:
        return self.folder / f"{runner}.{kind}"

    def _save(self, runner: str, record: dict[str, Any]) -> None:
        write_whole(self._file(runner, RECORD), json.dumps(record).encode(), mode=0o600)

    def _load(self, runner: str) -> dict[str, Any] | None:
        try:
            value = json.loads(self._file(runner, RECORD).read_bytes())
        except (OSError, ValueError):
            return None
        return value if isinstance(value, dict) else None


def _started_at(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (/proc/PID/stat field 22); None if
    there is no such process (or it is a zombie: over, its status waiting to be read)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    fields = stat[stat.rindex(b")") + 2 :].split()
    if fields[0] == b"Z":
        return None
    return int(fields[19])
