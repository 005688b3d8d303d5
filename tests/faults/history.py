"""Chaos with a history: clients record what they were told, a nemesis breaks processes, a checker judges.

The method is Jepsen's (docs/reliability.md, "6. Crash recovery"): every client appends to its own
history file, one JSON line per event, *what it was told* (``invoke`` before a submit, then ``ok``
with the id, or ``fail`` with the error or the exit status it got). A nemesis in the test process
SIGKILLs, SIGSTOPs/SIGCONTs and restarts the real ``spool coordinator`` and ``spool worker``
processes at random. Afterwards everything is restarted cleanly, the spool drains, and ``check``
holds every acknowledged submit against the final state of the files:

- every acknowledged job is terminal exactly once (in exactly one of done/ and dead/);
- done iff results/<id>.json exists, the result is whole JSON from the attempt recorded as done;
- each key maps to one job: all clients were told one id, and exactly one job file has that key;
- tries <= max_tries and attempt >= tries; no job in two folders;
- the ledger equals the folders; no tmp/ leftovers after a sweep; ``spool fsck`` exits 0;
- no attempt child outlived its worker (a worker that dies takes its running child with it).

Run as a script (``python history.py client ...``) it is one client process.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

# -- the client side --------------------------------------------------------------------------------


class Recorder:
    """Append-only history of one client: one JSON object per line, flushed as it is written."""

    def __init__(self, path: Path, client: str) -> None:
        self.client = client
        self._out = open(path, "a", encoding="utf-8")  # noqa: SIM115 - held for the client's life; close()

    def write(self, op: str, **fields: Any) -> None:
        self._out.write(json.dumps({"client": self.client, "op": op, "at": time.time(), **fields}) + "\n")
        self._out.flush()

    def close(self) -> None:
        self._out.close()


def pick_job(rng: random.Random) -> tuple[str, dict[str, Any]]:
    """A task that succeeds, fails for a while, or sleeps a little (examples.tasks)."""
    roll = rng.random()
    if roll < 0.4:
        return "echo", {"n": rng.randrange(1000)}
    if roll < 0.7:
        return "fail_until", {"attempt": rng.choice([2, 3])}
    return "sleep", {"seconds": round(rng.uniform(0.02, 0.4), 3)}


def client_main(argv: list[str]) -> int:
    """``client SPOOL HISTORY NAME SEED KEYS STOP_FILE MAX_SUBMITS``: submit until told to stop."""
    spool_root, history, name, seed, keys, stop_file, max_submits = argv
    from spool import Spool
    from spool.base.errors import SpoolError

    rng = random.Random(f"{seed}:{name}")
    recorder = Recorder(Path(history), name)
    sp = Spool(spool_root)
    cli = [sys.executable, "-m", "spool.cli", "--spool", spool_root]
    try:
        for n in range(int(max_submits)):
            if os.path.exists(stop_file):
                break
            # Keys come from a pool shared by every client, so they repeat on purpose, within and
            # across clients; a few submits leave the key to default (it is then the id).
            key = f"k{rng.randrange(int(keys))}" if rng.random() < 0.85 else None
            task, args = pick_job(rng)
            max_tries = rng.choice([2, 3, 4])
            via = "cli" if rng.random() < 0.08 else "api"
            recorder.write("invoke", n=n, key=key, task=task, args=args, max_tries=max_tries, via=via)
            if via == "api":
                try:
                    job_id = sp.submit(task, args, key=key, max_tries=max_tries)
                except SpoolError as err:
                    recorder.write("fail", n=n, key=key, error=f"{type(err).__name__}: {err}")
                else:
                    recorder.write("ok", n=n, key=key, id=job_id)
            else:
                argv_cli = [*cli, "submit", task, "--args-json", json.dumps(args), "--max-tries", str(max_tries)]
                done = subprocess.run(
                    argv_cli + (["--key", key] if key else []), check=False, capture_output=True, text=True, timeout=120
                )
                if done.returncode == 0:
                    recorder.write("ok", n=n, key=key, id=done.stdout.strip())
                else:
                    recorder.write("fail", n=n, key=key, exit=done.returncode, error=done.stderr.strip()[-500:])
            time.sleep(rng.uniform(0.0, 0.04))
    finally:
        sp.close()
        recorder.close()
    return 0


# -- reading histories ------------------------------------------------------------------------------


@dataclass
class History:
    events: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def read(cls, paths: list[Path]) -> History:
        events = []
        for path in paths:
            with open(path, encoding="utf-8") as handle:
                for line in handle:
                    if line.strip():
                        events.append(json.loads(line))
        return cls(events)

    def of(self, op: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["op"] == op]

    def acknowledged(self) -> dict[str, str | None]:
        """id -> key (None when left to default) for every submit a client was told succeeded."""
        return {e["id"]: e["key"] for e in self.of("ok")}

    def specs_by_key(self) -> dict[str, list[tuple[str, dict[str, Any], int]]]:
        specs: dict[str, list[tuple[str, dict[str, Any], int]]] = defaultdict(list)
        for e in self.of("invoke"):
            if e["key"] is not None:
                specs[e["key"]].append((e["task"], e["args"], e["max_tries"]))
        return specs


# -- the checker ------------------------------------------------------------------------------------


@dataclass
class Verdict:
    violations: list[str] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)

    def fail(self, message: str) -> None:
        self.violations.append(message)


def check(spool_root: Path, history: History) -> Verdict:
    """Hold every acknowledged submit against the files. Call with no spool process alive."""
    from spool import Spool
    from spool.fsck import sweep_tmp
    from spool.disk.fsio import fs
    from spool.disk.layout import State
    from spool.moves.recovery import list_folders
    from spool.moves.store import read_job

    verdict = Verdict()
    sp = Spool(spool_root)
    try:
        listing = list_folders(sp)
        for job_id, folders in listing.jobs.items():
            if len(folders) != 1:
                verdict.fail(f"{job_id}: in {len(folders)} folders {[s.value for s in folders]}")
        for name in listing.drops:
            verdict.fail(f"pending/{name}: a drop nobody ingested")
        for state, name in listing.strays:
            verdict.fail(f"{state.value}/{name}: a stray name")

        files = {}
        for job_id, folders in listing.jobs.items():
            try:
                files[job_id] = (folders[0], read_job(sp, folders[0], job_id))
            except Exception as err:  # noqa: BLE001 - any unreadable job file is a violation
                verdict.fail(f"{job_id}: unreadable job file in {folders[0].value}/ ({err})")
        results = set(fs.list_dir(sp.layout.fd("results")))

        # Every job (acknowledged or not: no client was killed, so every job file came from an
        # answered submit) ends terminal, done iff it has a result, within its tries.
        for job_id, (state, job_file) in files.items():
            name = f"{job_id}.json"
            if not state.terminal:
                verdict.fail(f"{job_id}: still {state.value} after the drain")
            if state is State.DONE:
                if name not in results:
                    verdict.fail(f"{job_id}: done without a result")
                else:
                    _check_result(sp, job_id, job_file, verdict)
            elif name in results:
                verdict.fail(f"{job_id}: {state.value} but has a result")
            if job_file.tries > job_file.job.max_tries:
                verdict.fail(f"{job_id}: tries {job_file.tries} > max_tries {job_file.job.max_tries}")
            if job_file.tries > job_file.attempt:
                verdict.fail(f"{job_id}: tries {job_file.tries} > attempt {job_file.attempt}")
            numbers = [int(r.attempt or 0) for r in job_file.attempts]
            if numbers != sorted(numbers) or len(set(numbers)) != len(numbers):
                verdict.fail(f"{job_id}: attempt records out of order {numbers}")
            if state is State.DEAD and job_file.reason is None:
                verdict.fail(f"{job_id}: dead without a reason")
            if job_file.lease:
                verdict.fail(f"{job_id}: {state.value} but still records a lease")
        for name in results:
            if name[:-5] not in files:
                verdict.fail(f"results/{name}: a result without a job")

        # What the clients were told.
        acked = history.acknowledged()
        for job_id in acked:
            if job_id not in files:
                verdict.fail(f"{job_id}: acknowledged but lost (no job file)")
        told: dict[str, set[str]] = defaultdict(set)
        for e in history.of("ok"):
            if e["key"] is not None:
                told[e["key"]].add(e["id"])
        by_key: dict[str, list[str]] = defaultdict(list)
        for job_id, (_state, job_file) in files.items():
            by_key[job_file.job.key].append(job_id)
        specs = history.specs_by_key()
        for key, ids in told.items():
            if len(ids) != 1:
                verdict.fail(f"key {key!r}: clients were told {len(ids)} ids {sorted(ids)}")
            if sorted(by_key.get(key, [])) != sorted(ids):
                verdict.fail(f"key {key!r}: told {sorted(ids)}, files hold {sorted(by_key.get(key, []))}")
        for key, holders in by_key.items():
            if len(holders) > 1:
                verdict.fail(f"key {key!r}: {len(holders)} jobs {sorted(holders)}")
        for job_id, told_key in acked.items():
            if job_id not in files:
                continue
            job = files[job_id][1].job
            if told_key is None and job.key != job_id:
                verdict.fail(f"{job_id}: submitted without a key, file has key {job.key!r}")
            if told_key is not None and (job.task, dict(job.args), job.max_tries) not in specs[told_key]:
                verdict.fail(
                    f"{job_id}: its spec {job.task} {dict(job.args)} was never submitted with key {told_key!r}"
                )

        # The ledger is an index of the files.
        on_disk = {job_id: state.value for job_id, (state, _f) in files.items()}
        ledger = sp.ledger.states()
        if ledger != on_disk:
            differ = sorted(set(ledger.items()) ^ set(on_disk.items()))
            verdict.fail(f"ledger disagrees with the files on {len(differ)} row(s), e.g. {differ[:3]}")

        leftovers = sorted(fs.list_dir(sp.layout.fd("tmp")))
        swept = sweep_tmp(sp)
        remaining = sorted(fs.list_dir(sp.layout.fd("tmp")))
        if remaining:
            verdict.fail(f"tmp/: {remaining[:5]} left after a sweep with no writer alive")

        states = Counter(state.value for state, _f in files.values())
        reasons = Counter(f.reason for state, f in files.values() if state is State.DEAD)
        verdict.figures.update(
            submits=len(history.of("invoke")),
            acknowledged=len(history.of("ok")),
            refused=len(history.of("fail")),
            jobs=len(files),
            distinct_acked_jobs=len(acked),
            keys=len(told),
            done=states.get("done", 0),
            dead=states.get("dead", 0),
            dead_reasons=dict(reasons),
            tmp_leftovers_before_sweep=len(leftovers),
            swept=len(swept),
            max_attempt=max((f.attempt for _s, f in files.values()), default=0),
        )
        refusals = Counter(e.get("error", "").split(":")[0] or f"exit {e.get('exit')}" for e in history.of("fail"))
        if refusals:
            verdict.figures["refusals"] = dict(refusals)
    finally:
        sp.close()

    from support import run_spool

    fsck = run_spool("fsck", spool=spool_root)
    if fsck.returncode != 0:
        verdict.fail(f"spool fsck exited {fsck.returncode}: {fsck.stdout.strip()[-2000:]} {fsck.stderr.strip()}")
    return verdict


def _check_result(sp: Any, job_id: str, job_file: Any, verdict: Verdict) -> None:
    """The one result is whole JSON and came from the attempt the file records as done."""
    from spool.disk.fsio import fs

    try:
        value = json.loads(fs.read_file(sp.layout.fd("results"), f"{job_id}.json", 1 << 20))
    except ValueError as err:
        verdict.fail(f"{job_id}: result is not whole JSON ({err})")
        return
    closed = [r for r in job_file.attempts if r.outcome == "done"]
    if len(closed) != 1 or job_file.attempts[-1].outcome != "done":
        verdict.fail(f"{job_id}: done, but its attempt records say {[r.outcome for r in job_file.attempts]}")
        return
    done_attempt = closed[0].attempt
    reported = value.get("attempt", value.get("succeeded_on")) if isinstance(value, dict) else None
    if job_file.job.task == "echo" and value.get("job") != job_id:
        verdict.fail(f"{job_id}: result names job {value.get('job')}")
    if reported is not None and reported != done_attempt:
        verdict.fail(f"{job_id}: result from attempt {reported}, but attempt {done_attempt} is recorded as done")
    if done_attempt != job_file.attempt:
        verdict.fail(f"{job_id}: done by attempt {done_attempt}, but the fence is at {job_file.attempt}")


# -- the nemesis and the run ------------------------------------------------------------------------

CONFIG = "lease_seconds: 1.5\npoll_seconds: 0.2\nbackoff_base_seconds: 0.1\nbackoff_max_seconds: 1\ngrace_seconds: 5\n"


@dataclass
class Slot:
    """One long-running spool process the nemesis plays with."""

    kind: str  # "coordinator" or "worker"
    argv: tuple[str, ...]
    proc: subprocess.Popen[bytes] | None = None
    stopped: bool = False
    killed: bool = False  # by us: any other exit is a crash

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


class Nemesis:
    """Random SIGKILL, SIGSTOP/SIGCONT and restarts of real spool processes, from a seed."""

    def __init__(self, procs: Any, rng: random.Random, env: dict[str, str], workers: int) -> None:
        self.procs, self.rng, self.env = procs, rng, env
        self.slots = [Slot("coordinator", ("coordinator",))]
        self.slots += [Slot("worker", ("worker", "--import", "examples.tasks")) for _ in range(workers)]
        self.faults: Counter[str] = Counter()
        self.log: list[str] = []
        self.crashes: list[str] = []  # processes that exited without being killed by us

    def start(self, slot: Slot) -> None:
        slot.proc = self.procs.start(*slot.argv, env=self.env, name=slot.kind)
        slot.stopped = slot.killed = False

    def notice_crashes(self) -> None:
        for slot in self.slots:
            if slot.proc is not None and not slot.killed and slot.proc.poll() is not None:
                self.crashes.append(f"{slot.kind} pid {slot.proc.pid} exited {slot.proc.returncode} by itself")
                slot.killed = True  # noted once

    def start_all(self) -> None:
        for slot in self.slots:
            self.start(slot)

    def step(self, started: float) -> None:
        self.notice_crashes()
        slot = self.rng.choice(self.slots)
        if not slot.alive:
            self.start(slot)
            self._note("restart", slot, started)
        elif slot.stopped:
            os.kill(slot.proc.pid, signal.SIGCONT)  # type: ignore[union-attr]
            slot.stopped = False
            self._note("cont", slot, started)
        elif self.rng.random() < 0.55:
            os.kill(slot.proc.pid, signal.SIGKILL)  # type: ignore[union-attr]
            slot.proc.wait()  # type: ignore[union-attr]
            slot.killed = True
            self._note("kill", slot, started)
        else:
            os.kill(slot.proc.pid, signal.SIGSTOP)  # type: ignore[union-attr]
            slot.stopped = True
            self._note("stop", slot, started)

    def _note(self, what: str, slot: Slot, started: float) -> None:
        self.faults[f"{what} {slot.kind}"] += 1
        self.log.append(f"{time.monotonic() - started:6.2f}s {what} {slot.kind} pid {slot.proc.pid}")  # type: ignore[union-attr]

    def stop_all(self, *, graceful: bool) -> None:
        """SIGCONT the stopped, then end every process (SIGTERM and wait, or SIGKILL)."""
        self.notice_crashes()
        for slot in self.slots:
            if slot.alive and slot.stopped:
                os.kill(slot.proc.pid, signal.SIGCONT)  # type: ignore[union-attr]
                slot.stopped = False
        for slot in self.slots:
            if slot.alive:
                os.kill(slot.proc.pid, signal.SIGTERM if graceful else signal.SIGKILL)  # type: ignore[union-attr]
                slot.killed = not graceful
        for slot in self.slots:
            if slot.proc is not None:
                try:
                    code = slot.proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.kill(slot.proc.pid, signal.SIGKILL)
                    slot.proc.wait()
                    self.crashes.append(f"{slot.kind} pid {slot.proc.pid} ignored SIGTERM for 30s")
                else:
                    # -SIGTERM: it had not installed its handlers yet (just started), which is fine too.
                    if graceful and not slot.killed and code not in (0, -signal.SIGTERM):
                        self.crashes.append(f"{slot.kind} pid {slot.proc.pid} exited {code} after SIGTERM")
                slot.killed = True


@dataclass
class ChaosRun:
    seed: int
    clients: int
    workers: int
    nemesis_seconds: float
    keys: int
    max_submits: int
    drain_seconds: float = 120.0


def orphans(tag: str) -> list[int]:
    """Processes still alive whose environment carries ``tag`` (our spool processes' children)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as handle:
                environ = handle.read()
            with open(f"/proc/{entry}/stat", "rb") as handle:
                zombie = handle.read().rsplit(b")", 1)[1].split()[0] == b"Z"
        except OSError:
            continue
        if tag.encode() in environ and not zombie:
            found.append(int(entry))
    return found


def run_chaos(spool_root: Path, work: Path, procs: Any, run: ChaosRun) -> tuple[Verdict, Nemesis]:
    """The whole run: clients and nemesis, a clean restart, the drain, then the checker."""
    from support import ROOT, wait_until

    from spool import Spool

    rng = random.Random(run.seed)
    (spool_root / "config.yaml").write_text(CONFIG)
    tag = f"CHAOS_RUN_TAG=chaos-{os.getpid()}-{run.seed}"
    env = {"CHAOS_RUN_TAG": tag.split("=", 1)[1]}
    nemesis = Nemesis(procs, rng, env, run.workers)
    nemesis.start_all()

    stop_file = work / "stop-clients"
    histories = [work / f"history-{n}.jsonl" for n in range(run.clients)]
    clients = []
    for n, path in enumerate(histories):
        with open(work / f"client-{n}.log", "wb") as log:
            clients.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        str(Path(__file__)),
                        "client",
                        str(spool_root),
                        str(path),
                        f"c{n}",
                        str(run.seed),
                        str(run.keys),
                        str(stop_file),
                        str(run.max_submits),
                    ],
                    cwd=ROOT,
                    env={**os.environ, **env},
                    start_new_session=True,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            )
    started = time.monotonic()
    timings: dict[str, float] = {}
    try:
        while time.monotonic() - started < run.nemesis_seconds:
            time.sleep(rng.uniform(0.15, 0.9))
            nemesis.step(started)
        stop_file.write_text("")
        for client in clients:
            client.wait(timeout=180)
        timings["nemesis"] = time.monotonic() - started

        # Restart everything cleanly and drain.
        nemesis.stop_all(graceful=False)
        nemesis.start_all()
        history = History.read(histories)
        acked = list(history.acknowledged())
        drain_started = time.monotonic()
        with Spool(spool_root) as sp:

            def drained() -> bool:
                return all((sp.state(job_id) or _Missing).terminal for job_id in acked)

            stuck: list[str] = []
            try:
                wait_until(
                    drained,
                    timeout=run.drain_seconds,
                    interval=0.2,
                    message=f"every acknowledged job to be terminal (seed {run.seed})",
                )
            except pytest.fail.Exception:  # reported below as a violation, with the jobs' states
                stuck = [
                    f"{job_id} {sp.state(job_id)} {sp.ledger.row(job_id)}"
                    for job_id in acked
                    if not (sp.state(job_id) or _Missing).terminal
                ]
                nemesis.notice_crashes()
            timings["drain"] = time.monotonic() - drain_started

            # The ledger is an index the coordinator reconciles a little on every pass.
            def converged() -> bool:
                from spool.disk.layout import ADVANCEMENT
                from spool.moves.recovery import list_folders

                listing = list_folders(sp)
                return sp.ledger.states() == {
                    job_id: max(folders, key=ADVANCEMENT.__getitem__).value for job_id, folders in listing.jobs.items()
                }

            try:
                wait_until(converged, timeout=20, interval=0.25)
            except pytest.fail.Exception:  # the checker reports it with details
                pass
        nemesis.stop_all(graceful=True)
        for client in clients:
            if client.poll() is None:
                client.kill()
        exits = Counter(client.wait() for client in clients)
        timings["total"] = time.monotonic() - started
        verdict = check(spool_root, history)
        if stuck:
            verdict.fail(f"{len(stuck)} acknowledged job(s) not terminal after {run.drain_seconds:g}s: {stuck[:10]}")
        for crash in nemesis.crashes:
            verdict.fail(f"a process crashed: {crash}")
        for log in sorted(procs.logs.glob("*.log")):
            text = log.read_text(errors="replace")
            if "Traceback" in text:
                verdict.fail(f"{log.name}: a traceback: {text[text.index('Traceback') :][:1500]}")
        if exits != Counter({0: run.clients}):
            verdict.fail(f"clients exited {dict(exits)}")
        left = orphans(tag.split("=", 1)[1])
        if left:
            verdict.fail(f"processes outlived the run: {left}")
        verdict.figures["clients"] = run.clients
        verdict.figures["workers"] = run.workers
        verdict.figures["faults"] = dict(sorted(nemesis.faults.items()))
        verdict.figures["seconds"] = {k: round(v, 1) for k, v in timings.items()}
        return verdict, nemesis
    finally:
        stop_file.write_text("")
        for client in clients:
            if client.poll() is None:
                os.killpg(client.pid, signal.SIGKILL)
                client.wait()
        nemesis.stop_all(graceful=False)


class _Missing:
    terminal = False


def seed_from_env(default: int | None = None) -> int:
    text = os.environ.get("SPOOL_CHAOS_SEED")
    if text:
        return int(text)
    return default if default is not None else random.SystemRandom().randrange(1, 2**31)


def report(verdict: Verdict, nemesis: Nemesis, seed: int) -> str:
    lines = [f"chaos seed {seed} (replay: SPOOL_CHAOS_SEED={seed})"]
    for name, value in verdict.figures.items():
        lines.append(f"  {name}: {value}")
    lines.append(f"  violations: {len(verdict.violations)}")
    lines += [f"    {v}" for v in verdict.violations[:50]]
    return "\n".join(lines)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "client":
        sys.exit(client_main(sys.argv[2:]))
    sys.exit(f"usage: {sys.argv[0]} client SPOOL HISTORY NAME SEED KEYS STOP_FILE MAX_SUBMITS")
