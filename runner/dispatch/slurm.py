"""The ``slurm`` engine: each engine job is a Slurm batch job running ``spool run-one``, through
the commands every Slurm site has (``sbatch``, ``squeue``, ``scancel``; ``$SLURM_CONF`` as usual).

    spool dispatch --server URL --token-file F --engine slurm --engine-opt partition=batch

Slurm requeues a batch job whose node fails unless told not to (``--requeue`` is a site's
default; even ``JobRequeue=0`` requeued one on node DOWN here), and spool's tries must be the
only tries: every job is submitted ``--no-requeue``, so a node that fails ends it ``NODE_FAIL``,
a definitive verdict the dispatcher fences the runner on.

A batch job is named ``spool.<runner>.<job id>`` and carries the dispatcher's label as its
``--comment``, so a dispatcher SIGKILLed and started again lists the jobs under its label
(``squeue``) and adopts them. Verdicts, from one ``squeue --states=all`` a poll round:
``PENDING``, ``CONFIGURING`` (a node booting) -> ``PENDING``; ``RUNNING``, ``COMPLETING``,
``SUSPENDED`` -> ``RUNNING``; ``COMPLETED`` -> ``SUCCEEDED``; ``FAILED``, ``CANCELLED``,
``TIMEOUT``, ``OUT_OF_MEMORY``, ``NODE_FAIL``, ``BOOT_FAIL``, ``DEADLINE``, ``PREEMPTED`` ->
``FAILED``; a job Slurm no longer lists (past ``MinJobAge``) or a state not named here -> ``LOST``.

The token reaches ``run-one`` in a file the compute nodes can read at the same path
(``--engine-opt token_file=PATH``; default ``<state_dir>/token``, 0600, right on one host or a
shared home); each job's output goes to ``<state_dir>/<runner>.log`` (``--engine-opt
state_dir=DIR`` on a filesystem the nodes share). ``--engine-opt partition=P``, ``account=A``
and ``sbatch_args="..."`` (more flags, split as a shell would) pass on to ``sbatch``.
"""

from __future__ import annotations

import logging
import os
import shlex
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path

from spool.base.errors import UsageError
from spool.runner.dispatch.engine import EngineJob, RunOne, Verdict
from spool.runner.dispatch.statedir import state_folder, token_file
from spool.workers import WORKER_NAME

log = logging.getLogger("spool.dispatch")

OPTIONS = ("state_dir", "label", "token_file", "partition", "account", "sbatch_args")
OUTPUT = "log"  # <state_dir>/<runner>.log: a batch job's output (the state folder is no spool)
STATES_FRESH_SECONDS = 0.5  # one squeue serves every poll of one round
COMMAND_SECONDS = 30.0
VERDICTS = {
    **dict.fromkeys(("PENDING", "CONFIGURING"), Verdict.PENDING),
    **dict.fromkeys(("RUNNING", "COMPLETING", "SUSPENDED"), Verdict.RUNNING),
    "COMPLETED": Verdict.SUCCEEDED,
    **dict.fromkeys(
        ("FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "BOOT_FAIL", "DEADLINE", "PREEMPTED"),
        Verdict.FAILED,
    ),
}


def open_engine(run_one: RunOne, token: str, label: str, options: Mapping[str, str]) -> SlurmEngine:
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise UsageError(f"--engine-opt {unknown[0]}: the slurm engine takes {', '.join(OPTIONS)}")
    folder = state_folder(label, options)
    token_path = token_file(folder, token, options)
    flags = ["--no-requeue", f"--comment={label}"]
    flags += [f"--partition={options['partition']}"] if options.get("partition") else []
    flags += [f"--account={options['account']}"] if options.get("account") else []
    try:
        flags += shlex.split(options.get("sbatch_args", ""))
    except ValueError as err:
        raise UsageError(f"--engine-opt sbatch_args: {err}") from None
    if any(flag.split("=")[0] in ("--requeue", "--comment", "-J", "--job-name") for flag in flags[2:]):
        raise UsageError("--engine-opt sbatch_args: --requeue, --comment and the job name are the engine's own")
    return SlurmEngine(run_one, label, folder, token_path, flags)


class SlurmEngine:
    def __init__(self, run_one: RunOne, label: str, folder: Path, token_file: str, flags: list[str]) -> None:
        self.run_one, self.label, self.folder, self.token_file, self.flags = run_one, label, folder, token_file, flags
        self._jobs: dict[str, tuple[str, str, str]] = {}  # slurm id -> (state, name, comment)
        self._looked = 0.0

    def output(self, runner: str) -> Path:
        return self.folder / f"{runner}.{OUTPUT}"

    # -- the protocol ------------------------------------------------------------------------

    def submit(self, runner: str, job_id: str) -> EngineJob:
        argv = self.run_one.argv(runner, job_id, self.token_file)
        command = [
            "sbatch",
            "--parsable",
            f"--job-name=spool.{runner}.{job_id}",
            f"--output={self.output(runner)}",
            *self.flags,
            "--wrap",
            shlex.join(argv),
        ]
        out = _run(command, env={**os.environ, **self.run_one.env})
        slurm_id = out.strip().split(";")[0]  # --parsable: "id" or "id;cluster"
        if not slurm_id.isdigit():
            raise UsageError(f"sbatch answered {out.strip()[:200]!r}, not a job id")
        self._looked = 0.0
        return EngineJob(runner, job_id, time.time(), slurm_id)

    def poll(self, job: EngineJob) -> Verdict:
        listed = self._states().get(job.handle)
        if listed is None:
            return Verdict.LOST
        return VERDICTS.get(listed[0], Verdict.LOST)

    def cancel(self, job: EngineJob) -> None:
        if job.handle:
            _run(["scancel", job.handle], check=False)

    def forget(self, job: EngineJob) -> None:
        listed = self._jobs.get(job.handle)
        if listed is not None and listed[0] == "COMPLETED":
            try:
                os.unlink(self.output(job.runner))  # a success's output is not worth keeping
            except FileNotFoundError:
                pass

    def adopt(self) -> list[EngineJob]:
        jobs = []
        for slurm_id, (state, name, comment) in sorted(self._states(force=True).items()):
            prefix, _, rest = name.partition(".")
            runner, _, job_id = rest.rpartition(".")
            if comment != self.label or prefix != "spool" or not WORKER_NAME.fullmatch(runner) or not job_id:
                continue
            if VERDICTS.get(state) in (Verdict.PENDING, Verdict.RUNNING):
                jobs.append(EngineJob(runner, job_id, time.time(), slurm_id))
        return jobs

    def stop(self) -> None:
        pass  # the batch jobs run on; nothing of ours to let go

    # -- squeue ------------------------------------------------------------------------------

    def _states(self, *, force: bool = False) -> dict[str, tuple[str, str, str]]:
        """Every job Slurm lists (finished ones within ``MinJobAge`` too) -> (state, name,
        comment), looked at once a round."""
        if force or time.monotonic() - self._looked > STATES_FRESH_SECONDS:
            try:
                out = _run(["squeue", "--noheader", "--states=all", "--format=%i|%T|%j|%k"])
            except UsageError as err:
                if force:
                    raise
                log.warning("squeue: %s; the last listing stands", err)  # slurmctld busy or restarting
                return self._jobs
            found = {}
            for line in out.splitlines():
                fields = line.split("|", 3)
                if len(fields) == 4:
                    found[fields[0].strip()] = (fields[1].strip(), fields[2].strip(), fields[3].strip())
            self._jobs, self._looked = found, time.monotonic()
        return self._jobs


def _run(command: list[str], *, env: Mapping[str, str] | None = None, check: bool = True) -> str:
    """A Slurm command's output; UsageError when it is missing or fails (with its own words)."""
    try:
        ran = subprocess.run(
            command, capture_output=True, text=True, env=None if env is None else dict(env), timeout=COMMAND_SECONDS
        )
    except FileNotFoundError:
        raise UsageError(f"the slurm engine needs {command[0]} on PATH") from None
    except subprocess.TimeoutExpired:
        raise UsageError(f"{command[0]} did not answer within {COMMAND_SECONDS:g}s") from None
    if check and ran.returncode != 0:
        raise UsageError(f"{' '.join(command[:2])}: {(ran.stderr or ran.stdout).strip()[:300]}")
    return ran.stdout
