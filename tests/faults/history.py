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
- no attempt child outlived its worker (a worker that dies takes its running child with it);
- the queues' limits held (``check_queues``): a share of the jobs goes to queue ``capped``
  (``concurrency 2``) and to queue ``rated`` (``rate 10/s``), whose handler (``chaos_slot``)
  records when it started and ended; the nemesis also changes those limits under fire (``spool
  queue set capped --concurrency 1|2``, ``spool queue pause|resume rated``). Never more than 2
  attempts of ``capped`` ran at once, never more than 10 claims of ``rated`` in any second, no try
  was spent without an attempt, and every job of those queues ended exactly once like the rest.

Run as a script (``python history.py client ...``) it is one client process; imported by a worker
(``--import tests.faults.history``) it registers the handler ``chaos_slot``.
"""

from __future__ import annotations

import bisect
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

from spool import current, task

CAPPED, CAP = "capped", 2  # spool queue set capped --concurrency 2 (the nemesis flips it to 1 and back)
RATED, RATE, RATE_MS = "rated", 10, 1000  # spool queue set rated --rate 10/s (the nemesis pauses it)

# -- the handler the limited queues run --------------------------------------------------------------


@task("chaos_slot")
def chaos_slot(seconds: float = 0.05, log: str = "", fail_until: int = 0) -> dict[str, Any]:
    """Sleep ``seconds``, appending a ``start`` line before and an ``end`` line after (job, attempt,
    pid, wall time) to ``log``/slots-<pid>.jsonl; attempts before ``fail_until`` then fail. A
    SIGKILLed attempt leaves its ``start`` alone; a stopped worker's child goes on and records its
    ``end`` whatever became of its lease (``check_queues`` clips it to the lease)."""
    now = current()
    path = os.path.join(log, f"slots-{os.getpid()}.jsonl")

    def note(event: str) -> None:
        line = {"job": now.job_id, "attempt": now.attempt, "pid": os.getpid(), "event": event, "at": time.time()}
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, (json.dumps(line) + "\n").encode())
        finally:
            os.close(fd)

    note("start")
    time.sleep(seconds)
    note("end")
    if now.attempt < fail_until:
        raise RuntimeError(f"attempt {now.attempt} of {now.job_id} fails on purpose")
    return {"attempt": now.attempt}


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


def pick_job(rng: random.Random, slots: str) -> tuple[str, dict[str, Any], str | None]:
    """(task, args, queue): in the default queue a task that succeeds, fails for a while, or sleeps
    a little (examples.tasks); in ``capped`` or ``rated``, a ``chaos_slot`` that records its run in
    ``slots`` and sometimes fails its first attempt."""
    roll = rng.random()
    if roll < 0.22:
        # A few outlast the lease (1.5 s), so a SIGSTOPped worker's child may run past its lease.
        seconds = round(rng.uniform(1.0, 2.0) if rng.random() < 0.04 else rng.uniform(0.02, 0.15), 3)
        return "chaos_slot", {"seconds": seconds, "log": slots, "fail_until": rng.choice([0, 0, 2])}, CAPPED
    if roll < 0.34:
        return "chaos_slot", {"seconds": round(rng.uniform(0.0, 0.05), 3), "log": slots}, RATED
    if roll < 0.6:
        return "echo", {"n": rng.randrange(1000)}, None
    if roll < 0.8:
        return "fail_until", {"attempt": rng.choice([2, 3])}, None
    return "sleep", {"seconds": round(rng.uniform(0.02, 0.4), 3)}, None


def client_main(argv: list[str]) -> int:
    """``client SPOOL HISTORY NAME SEED KEYS STOP_FILE MAX_SUBMITS``: submit until told to stop."""
    spool_root, history, name, seed, keys, stop_file, max_submits = argv
    from spool import Spool
    from spool.base.errors import SpoolError

    rng = random.Random(f"{seed}:{name}")
    slots = str(Path(history).parent / "slots")
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
            task_name, args, queue = pick_job(rng, slots)
            max_tries = rng.choice([2, 3, 4])
            via = "cli" if rng.random() < 0.08 else "api"
            recorder.write("invoke", n=n, key=key, task=task_name, args=args, max_tries=max_tries, queue=queue, via=via)
            if via == "api":
                try:
                    job_id = sp.submit(task_name, args, key=key, max_tries=max_tries, queue=queue)
                except SpoolError as err:
                    recorder.write("fail", n=n, key=key, error=f"{type(err).__name__}: {err}")
                else:
                    recorder.write("ok", n=n, key=key, id=job_id)
            else:
                argv_cli = [*cli, "submit", task_name, "--args-json", json.dumps(args), "--max-tries", str(max_tries)]
                argv_cli += (["--key", key] if key else []) + (["--queue", queue] if queue else [])
                done = subprocess.run(argv_cli, check=False, capture_output=True, text=True, timeout=120)
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

    def specs_by_key(self) -> dict[str, list[tuple[str, dict[str, Any], int, str]]]:
        specs: dict[str, list[tuple[str, dict[str, Any], int, str]]] = defaultdict(list)
        for e in self.of("invoke"):
            if e["key"] is not None:
                specs[e["key"]].append((e["task"], e["args"], e["max_tries"], e.get("queue") or "default"))
        return specs


# -- the checker ------------------------------------------------------------------------------------


@dataclass
class Verdict:
    violations: list[str] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)

    def fail(self, message: str) -> None:
        self.violations.append(message)


def check(spool_root: Path, history: History, slots: Path | None = None) -> Verdict:
    """Hold every acknowledged submit against the files (and, given the handlers' ``slots``
    folder, the queues' limits: ``check_queues``). Call with no spool process alive."""
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
            if told_key is not None and (job.task, dict(job.args), job.max_tries, job.queue) not in specs[told_key]:
                verdict.fail(
                    f"{job_id}: its spec {job.task} {dict(job.args)} in queue {job.queue} was never submitted "
                    f"with key {told_key!r}"
                )

        if slots is not None:
            check_queues(files, slots, verdict)

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


def ran_past(end: float, ended: float) -> bool:
    """Whether a handler's ``end`` (its own clock reading) is after its record's ``ended``. The
    record's time is floored to its millisecond (``format_time``), so an end within that
    millisecond may still be before the record's real time: only a later millisecond surely is
    (a .ci/run of 2026-12-06 failed a done attempt whose end and record both read 17.965)."""
    return end >= ended + 0.001


def _seconds(text: str) -> float:
    from spool.base.timetext import parse_time

    return parse_time(text, "attempt record").timestamp()


def read_slots(slots: Path) -> dict[tuple[str, int], dict[str, float]]:
    """(job, attempt) -> {"start": t, "end": t} from the handlers' lines (``end`` missing when the
    attempt was killed mid-run)."""
    runs: dict[tuple[str, int], dict[str, float]] = defaultdict(dict)
    for path in sorted(slots.glob("slots-*.jsonl")) if slots.is_dir() else []:
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                event = json.loads(line)
                runs[(event["job"], event["attempt"])][event["event"]] = event["at"]
    return runs


def most_at_once(intervals: list[tuple[float, float, str]]) -> tuple[int, float, list[str]]:
    """The most half-open intervals [start, end) covering one instant, that instant, and who.

    Half-open: an attempt whose record says it ended at the millisecond another started did not
    overlap it (the times are whole milliseconds, cut down, and the slot is freed after the end
    is written and taken before the start is)."""
    events = sorted(
        [(end, 0, name) for start, end, name in intervals if end > start]
        + [(start, 1, name) for start, end, name in intervals if end > start]
    )
    running: set[str] = set()
    best, when, who = 0, 0.0, []
    for at, starts, name in events:
        if starts:
            running.add(name)
            if len(running) > best:
                best, when, who = len(running), at, sorted(running)
        else:
            running.discard(name)
    return best, when, who


def rate_busiest(starts_ms: list[int], window_ms: int) -> int:
    """The most claims within one sliding window: a claim at ``t`` counts those after ``t - window``
    (``spool.ledger.limits``), so claims ``window`` apart are never in one window together."""
    starts = sorted(starts_ms)
    return max((bisect.bisect_right(starts, t + window_ms - 1) - i for i, t in enumerate(starts)), default=0)


def check_queues(files: dict[str, tuple[Any, Any]], slots: Path, verdict: Verdict, *, cap: int = CAP) -> None:
    """The limited queues' promises, from the handlers' lines and the job files' attempt records.

    **Concurrency** (queue ``capped``, at most ``cap``). An attempt counts as running from the
    moment its handler recorded ``start`` until its record's ``ended``: the time its job left
    leased/ (a completion, a failure, the coordinator's expiry of a SIGKILLed or SIGSTOPped
    worker's lease, recovery's close of a lost claim). That is the lease's life: a handler's own
    ``end`` is not used, so an attempt whose worker was SIGKILLed mid-run (no ``end``) or whose
    worker was SIGSTOPped while its child went on (an ``end`` after its lease expired and the job
    was claimed again) counts exactly as long as its lease held, which is all the limit promises:
    from the coordinator's view, the lease fence makes a stopped process's attempt dead once it
    has expired. The rule is sound against the ledger's count: a slot is taken (the row turns
    'leased') before the claim returns and so before the handler starts, and freed (the row
    leaves 'leased') only after the move out of leased/, after ``ended`` was read from the clock.
    The figures count the handlers clipped so (``ran_past_lease``), those that started after
    their lease had ended (``ran_after_lease``: a worker stopped between its claim and the start,
    on a dead lease, so not counted), and the most slots held at once by the records alone,
    ``started`` to ``ended`` (``slot_overlap_by_records``, a figure: ``started`` is the
    reservation's time, read once its transaction holds the ledger's write lock, so a claim that
    waited there starts after the completion that freed its slot; tests/faults/test_queue_faults.py
    holds that rule, and the stress tier's limited chaos run checks it over the records alone).

    **Rate** (queue ``rated``, at most ``RATE`` per ``RATE_MS``). A claim's window entry is
    its attempt's ``started`` (the same whole millisecond): no ``RATE + 1`` records of real claims
    (``worker`` set; recovery's stand-in for a claim that died unrecorded has none) may start
    within one window.

    **Tries**. A limit never spends a try: a job's tries never exceed its attempts started (the
    records not given back, ``released``).
    """
    runs: dict[str, dict[int, dict[str, float]]] = defaultdict(dict)
    for (run_job, attempt), run in read_slots(slots).items():
        runs[run_job][attempt] = run
        if run_job not in files:
            verdict.fail(f"{run_job}#{attempt}: a handler ran for a job that has no file")
    by_queue: dict[str, list[tuple[str, Any, Any]]] = defaultdict(list)
    for job_id, (state, job_file) in files.items():
        by_queue[job_file.job.queue].append((job_id, state, job_file))
        spent = [r for r in job_file.attempts if r.outcome != "released"]
        if job_file.tries > len(spent):
            verdict.fail(f"{job_id} ({job_file.job.queue}): tries {job_file.tries} > {len(spent)} attempts started")

    running: list[tuple[float, float, str]] = []
    slots_held: list[tuple[float, float, str]] = []
    after_lease = past_lease = handler_runs = 0
    for job_id, _state, job_file in by_queue.get(CAPPED, []):
        records = {r.attempt: r for r in job_file.attempts}
        for record in job_file.attempts:
            if record.worker is not None and record.started and record.ended:
                slots_held.append((_seconds(record.started), _seconds(record.ended), f"{job_id}#{record.attempt}"))
        for attempt, run in sorted(runs.get(job_id, {}).items()):
            if "start" not in run:
                continue
            handler_runs += 1
            record = records.get(attempt)
            name = f"{job_id}#{attempt}"
            if record is None or record.started is None or record.ended is None:
                verdict.fail(f"{name}: its handler ran, but the job file has no closed record of it")
                continue
            start, ended = run["start"], _seconds(record.ended)
            if start < _seconds(record.started) - 0.001:
                verdict.fail(f"{name}: its handler started at {start:.3f}, before its claim {record.started}")
            if start >= ended:
                after_lease += 1
            elif ran_past(run.get("end", ended), ended):
                past_lease += 1  # its child went on after the lease ended: clipped to the lease
                if record.outcome == "done":
                    verdict.fail(f"{name}: done at {record.ended}, before its handler ended at {run['end']:.3f}")
            running.append((start, ended, name))

    most, when, who = most_at_once(running)
    if most > cap:
        verdict.fail(f"queue {CAPPED}: {most} attempts running at once (cap {cap}) at {when:.3f}: {who}")
    held, held_when, held_who = most_at_once(slots_held)
    if held > cap:
        # Not the running check's rule: a record's ``started`` is read before the claim's
        # transaction waits for the ledger's lock, so it can precede the slot it stands for.
        verdict.figures["slots_by_records_over_cap"] = f"{held} at {held_when:.3f}: {held_who}"

    starts = sorted(
        round(_seconds(r.started) * 1000)
        for _job_id, _state, job_file in by_queue.get(RATED, [])
        for r in job_file.attempts
        if r.worker is not None and r.started
    )
    busiest = rate_busiest(starts, RATE_MS)
    if busiest > RATE:
        verdict.fail(f"queue {RATED}: {busiest} claims within {RATE_MS} ms (rate {RATE}/s)")

    verdict.figures["queues"] = {
        queue: dict(Counter(state.value for _j, state, _f in entries)) for queue, entries in sorted(by_queue.items())
    }
    verdict.figures[f"{CAPPED}_most_running_at_once"] = most
    verdict.figures[f"{CAPPED}_handler_runs"] = handler_runs
    verdict.figures[f"{CAPPED}_ran_after_lease"] = after_lease
    verdict.figures[f"{CAPPED}_ran_past_lease"] = past_lease
    verdict.figures[f"{CAPPED}_slot_overlap_by_records"] = held
    verdict.figures[f"{RATED}_claims"] = len(starts)
    verdict.figures[f"{RATED}_most_claims_in_a_second"] = busiest


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
LIMIT_CHANGES = (
    ("queue", "set", CAPPED, "--concurrency", "1"),
    ("queue", "set", CAPPED, "--concurrency", str(CAP)),
    ("queue", "pause", RATED),
    ("queue", "resume", RATED),
)


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
        imports = ("--import", "examples.tasks", "--import", "tests.faults.history")
        self.slots += [Slot("worker", ("worker", *imports)) for _ in range(workers - 1)]
        # One worker names its queues: its claims read each queue's head (claim_by_queue).
        self.slots += [Slot("worker", ("worker", *imports, "--queues", f"default,{CAPPED},{RATED}"))][:workers]
        self.faults: Counter[str] = Counter()
        self.log: list[str] = []
        self.crashes: list[str] = []  # processes that exited without being killed by us
        self.limit_calls: list[tuple[tuple[str, ...], subprocess.Popen[bytes]]] = []

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
        if self.rng.random() < 0.15:
            self.change_limits(started)
            return
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

    def change_limits(self, started: float) -> None:
        """``spool queue set|pause|resume`` under fire (``spool.queues.set_limits``: the file
        through tmp/ and a rename, then the ledger's row), not waited for: a SIGSTOPped process
        may hold the ledger's lock for a while, and the nemesis goes on meanwhile."""
        argv = self.rng.choice(LIMIT_CHANGES)
        self.limit_calls.append((argv, self.procs.start(*argv, env=self.env, name="queue")))
        self.faults[" ".join(argv[:2] + argv[3:])] += 1
        self.log.append(f"{time.monotonic() - started:6.2f}s {' '.join(argv)}")

    def finish_limit_calls(self) -> None:
        """Wait for every limits change; each must have exited 0 (the checker's business too)."""
        for argv, proc in self.limit_calls:
            try:
                code = proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                code = proc.wait()
            if code != 0:
                self.crashes.append(f"spool {' '.join(argv)} exited {code}")
        self.limit_calls.clear()

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
    import pytest
    from support import ROOT, wait_until

    from spool import Spool
    from spool.queues import set_limits

    rng = random.Random(run.seed)
    (spool_root / "config.yaml").write_text(CONFIG)
    (work / "slots").mkdir()
    with Spool(spool_root) as sp:
        set_limits(sp, CAPPED, concurrency=CAP)
        set_limits(sp, RATED, rate=f"{RATE}/s")
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

        # Restart everything cleanly, put the limits back as they began, and drain.
        nemesis.stop_all(graceful=False)
        nemesis.finish_limit_calls()
        with Spool(spool_root) as sp:
            set_limits(sp, CAPPED, concurrency=CAP)
            set_limits(sp, RATED, paused=False)
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
        verdict = check(spool_root, history, work / "slots")
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
