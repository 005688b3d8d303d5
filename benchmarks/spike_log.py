"""Issue 19's spike, part 2: a prototype of "one sync per acknowledged submit" beside Huey.

    python benchmarks/spike_log.py --dir DIR [--jobs N] [--shapes a,b,c] [--rounds R] [--backlog N]
        [--submit log|file|shared] [--ingest-sync fsync|syncfs] [--claim rewrite|rename]
        [--cpu-ms producer=0,ingest=0,worker=0] [--no-huey] [--strace-huey N] [--json]

It runs no spool code: plain ``os`` calls in the shape the design would have.

- **Producers** (1 in shape (a), ``--producers`` (4) in shape (c)): each appends fixed-size job
  records (``REC`` bytes: magic, CRC-32, sequence, length, JSON) to its own log file, pre-zeroed
  (written with zeros and fsync'd when the producer starts, so every block is allocated and
  initialised), and acknowledges each submit after ONE ``fdatasync`` of it: an overwrite of
  allocated blocks commits no file metadata, so on ext4 no journal commit either (only mtime is
  dirty, which fdatasync does not write).
- ``--submit file``: SPEC.md's submit instead, the floor of spool's own recipe: each producer
  writes each job in tmp/, fsyncs it, renames it without replace into pending/ and fsyncs
  pending/ (two syncs per acknowledged submit, the second committing the name); no log, no
  ingester. With ``--claim rewrite`` this is every sync and creation spool makes per job today,
  with none of its Python: how far spool's recipe can go, beside Huey in the same run.
- ``--submit shared``: ``--submit file`` with pending/'s fsync shared among the producers
  (``shared_fsync``): an fsync of a folder makes durable every rename made in it before the fsync
  began, so a producer whose rename precedes a sync another producer started skips its own.
  Measured to bound that lever before building it into spool (docs/performance.md, 2026-12-08).
- **One ingester** (the coordinator's part): reads each log from its cursor until a record that
  does not check (zeros, or torn: its CRC fails), and turns up to ``INGEST_MOST`` new records into
  ``pending/<id>.yaml`` with the durable recipe: written in tmp/, each file fsync'd
  (``--ingest-sync fsync``, the brief's recipe) or one ``syncfs`` for the batch's files
  (``syncfs``, as spool's group commit does), renamed without replace, then ONE fsync of
  pending/ for the batch; then it marks them ingested: the cursors (8 bytes per log in one
  pre-zeroed file) overwritten and ``fdatasync``'d once per batch. Woken by inotify on logs/.
- **2 workers** with spool's group commit as ``spool.moves.group`` and ``runner.batching`` do it:
  a claim takes up to 16 ready jobs (woken by inotify on pending/; the listing of pending/ is
  kept until used up, as spool's ledger stands in for listing it); ``--claim rewrite`` (spool
  today): each renamed pending/ -> leased/, its rewritten content (attempt, tries, lease) staged
  in tmp/ and synced (one fsync alone, one ``syncfs`` for a batch), renamed over it, one fsync of
  leased/; ``--claim rename``: the rename and the fsync of leased/ only (the floor's claim: the
  try is the file's presence in leased/). Each handler reads its args and returns them; its
  result waits up to 5 ms (16 at most, or until the worker is idle; ``--batch-most``, ``--hold-ms``:
  spool's are 64 and 50 ms since) to be completed with others:
  results and done files staged in tmp/, one sync (``syncfs``; one fsync each when alone),
  results linked (create-exclusive), one fsync of results/, done files renamed into done/, one
  fsync of done/, then the leased/ copies removed: spool's ``complete_many``.

Shape (b), a backlog (``--backlog`` jobs, 10,000 as ``benchmarks/bench.py``'s): one producer
submits them all with no worker running (and the ingester, with ``--submit log``, turns them all
into pending/ files), then the 2 workers start; the drain is timed from the first batch of
results to the last, as ``benchmarks/peers.py``'s shape (b) times Huey's. It is the floor of a
backlog's drain: every sync and creation of a claim and a completion, none of spool's Python.

``--strace-huey N`` counts Huey's own fsync-family calls over N jobs of shape (a) in each round
(``strace``, ``benchmarks/peers.py``'s ``shape_strace``): the anchor's syscalls, in the same run.

``--cpu-ms`` burns CPU per job in each role, to model what spool's Python costs there today (the
prototype's own work per job is a fraction of it): e.g. ``worker=1.0,ingest=0.3,producer=0.1``.

Printed per shape: drain jobs/s (first submit -> last result durable), accepted submits/s (first
submit -> last acknowledged), syncs per job by role (fsync, fdatasync, syncfs: this script's own
calls), file creations per job, CPU ms per job by role, jbd2 journal commits per job where the
folder is on a journaled ext4, and Huey's drain and submits in the same run on the same folder
(``benchmarks/peers.py``'s shapes, the same producer counts), with the ratios.
"""

from __future__ import annotations

import argparse
import ctypes
import fcntl
import json
import os
import resource
import select
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

THIS = Path(__file__).resolve()
FOLDERS = ("logs", "tmp", "pending", "leased", "results", "done")
REC = 256  # one record; a multiple of 512 bytes' divisors, so none crosses a sector
MAGIC = b"SPJ1"  # then CRC-32 of the rest, sequence (u64), payload length (u16), payload, zeros
INGEST_MOST = 256  # records turned into files per ingest batch
CLAIM_MOST = 16  # runner.batching.CLAIM_BATCH_MOST when the spike was run (64 since: --batch-most)
HOLD_SECONDS = 0.005  # runner.batching.HOLD_SECONDS then (0.05 since: --hold-ms)
IN_MODIFY, IN_CREATE, IN_MOVED_TO = 0x2, 0x100, 0x80
_libc = ctypes.CDLL(None, use_errno=True)


class Disk:
    """The prototype's folders, with this process's syncs and creations counted."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.fd = {name: os.open(root / name, os.O_RDONLY | os.O_DIRECTORY) for name in FOLDERS}
        self.calls = {"fsync": 0, "fdatasync": 0, "syncfs": 0, "creations": 0, "shared": 0}

    def fsync(self, fd: int) -> None:
        os.fsync(fd)
        self.calls["fsync"] += 1

    def fdatasync(self, fd: int) -> None:
        os.fdatasync(fd)
        self.calls["fdatasync"] += 1

    def syncfs(self) -> None:
        if _libc.syncfs(self.fd["tmp"]) != 0:
            raise OSError(ctypes.get_errno(), "syncfs failed")
        self.calls["syncfs"] += 1

    def create(self, folder: str, name: str, data: bytes) -> int:
        """A new file written whole, left open (the caller syncs it or not, then closes it)."""
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600, dir_fd=self.fd[folder])
        self.calls["creations"] += 1
        os.write(fd, data)
        return fd

    def move(self, name: str, src: str, dst: str, new: str | None = None) -> None:
        os.rename(name, new or name, src_dir_fd=self.fd[src], dst_dir_fd=self.fd[dst])


class Inotify:
    """inotify on one folder through libc: ``wait`` returns when something happened or at the timeout."""

    def __init__(self, path: Path, mask: int) -> None:
        self.fd = _libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if self.fd < 0 or _libc.inotify_add_watch(self.fd, str(path).encode(), mask) < 0:
            raise OSError(ctypes.get_errno(), f"inotify on {path}")

    def wait(self, timeout: float) -> None:
        if select.select([self.fd], [], [], timeout)[0]:
            self.drain()

    def drain(self) -> None:
        try:
            while os.read(self.fd, 65536):
                pass
        except BlockingIOError:
            pass


def burn(ms: float) -> None:
    """``ms`` of this process's CPU (the modelled Python of a role)."""
    if ms > 0:
        end = time.process_time() + ms / 1000
        while time.process_time() < end:
            pass


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


# -- records -----------------------------------------------------------------------------------


def record(seq: int, payload: bytes) -> bytes:
    body = struct.pack("<QH", seq, len(payload)) + payload
    if len(body) + 8 > REC:
        raise ValueError(f"a job of {len(payload)} bytes does not fit a {REC}-byte record")
    return (MAGIC + struct.pack("<I", zlib.crc32(body)) + body).ljust(REC, b"\0")


def parse(raw: bytes) -> bytes | None:
    """The payload of a record that checks; None for zeros or a torn record (never acknowledged)."""
    if len(raw) < REC or raw[:4] != MAGIC:
        return None
    (crc,) = struct.unpack_from("<I", raw, 4)
    _seq, size = struct.unpack_from("<QH", raw, 8)
    body = raw[8 : 8 + 10 + size]
    return body[10:] if zlib.crc32(body) == crc and size <= REC - 18 else None


def prezeroed(path: Path, size: int) -> int:
    """A file of ``size`` zero bytes, written (not fallocated: unwritten extents would be converted,
    a metadata change, at the first write of each) and fsync'd with its folder."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    chunk = b"\0" * (1 << 20)
    for off in range(0, size, len(chunk)):
        os.pwrite(fd, chunk[: min(len(chunk), size - off)], off)
    os.fsync(fd)
    dfd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    os.fsync(dfd)
    os.close(dfd)
    return fd


# -- the roles ---------------------------------------------------------------------------------


def producer(root: Path, me: int, jobs: int, start_at: float, cpu_ms: float, submit: str) -> dict[str, Any]:
    """One producer: ``jobs`` submits one by one from ``start_at``, each acknowledged after its
    sync(s): ``log``, one fdatasync of a record in its pre-zeroed log; ``file`` (``--submit
    file``), SPEC.md's submit, the job durable in pending/ (its fsync, then pending/'s)."""
    disk = Disk(root)
    log_fd = prezeroed(root / "logs" / f"p{me}.log", (jobs + 1) * REC) if submit == "log" else -1
    syncs_fd = os.open(root / "pending-syncs", os.O_RDWR | os.O_CREAT, 0o600) if submit == "shared" else -1
    (root / f"ready-p{me}").touch()
    while time.time() < start_at:
        time.sleep(0.001)
    cpu0, first, latencies = _cpu(), time.time(), []
    for n in range(jobs):
        t0 = time.perf_counter()
        burn(cpu_ms)
        job_id = f"{me:02d}-{n:08d}"
        payload = json.dumps({"id": job_id, "task": "echo", "args": {"i": n}}).encode()
        if submit == "log":
            os.pwrite(log_fd, record(n, payload), n * REC)
            disk.fdatasync(log_fd)  # acknowledged
        else:
            fd = disk.create("tmp", job_id + ".yaml", job_file(payload))
            disk.fsync(fd)
            os.close(fd)
            rename_noreplace(job_id + ".yaml", disk.fd["tmp"], disk.fd["pending"])
            if submit == "shared":
                shared_fsync(disk, "pending", syncs_fd)  # acknowledged
            else:
                disk.fsync(disk.fd["pending"])  # acknowledged
        latencies.append(time.perf_counter() - t0)
    submitted = time.time()
    latencies.sort()
    return {
        "first": first,
        "submitted": submitted,
        "cpu": _cpu() - cpu0,
        "calls": disk.calls,
        "p50_ms": latencies[len(latencies) // 2] * 1000,
        "p99_ms": latencies[int(len(latencies) * 0.99)] * 1000,
    }


RENAME_NOREPLACE = 1
SYNCS = struct.Struct("<QQ")  # pending-syncs: fsyncs of the folder begun, and finished


def shared_fsync(disk: Disk, folder: str, counters_fd: int) -> None:
    """Make ``folder``'s entries made so far durable, by this process's fsync or another's.

    ``begun`` is read after the caller's rename: a sync numbered past it began after the rename
    and covers it. Under the counters' flock (held through the fsync, so the producers that
    queue behind a sync find it finished), skip when ``finished`` has passed ``begun``, else
    number a new sync, make it, record it finished. Counted in ``disk.calls["shared"]``: syncs
    skipped because another producer's covered them."""
    raw = os.pread(counters_fd, SYNCS.size, 0)
    begun = SYNCS.unpack(raw)[0] if len(raw) == SYNCS.size else 0
    fcntl.flock(counters_fd, fcntl.LOCK_EX)
    try:
        raw = os.pread(counters_fd, SYNCS.size, 0)
        started, finished = SYNCS.unpack(raw) if len(raw) == SYNCS.size else (0, 0)
        if finished > begun:
            disk.calls["shared"] += 1
            return
        os.pwrite(counters_fd, SYNCS.pack(started + 1, finished), 0)
        disk.fsync(disk.fd[folder])
        os.pwrite(counters_fd, SYNCS.pack(started + 1, started + 1), 0)
    finally:
        fcntl.flock(counters_fd, fcntl.LOCK_UN)


def rename_noreplace(name: str, src_fd: int, dst_fd: int) -> None:
    """renameat2(RENAME_NOREPLACE), as spool's ``RealFS.rename_noreplace``."""
    if _libc.renameat2(src_fd, name.encode(), dst_fd, name.encode(), RENAME_NOREPLACE) != 0:
        raise OSError(ctypes.get_errno(), f"renameat2 {name}")


def job_file(payload: bytes) -> bytes:
    """A pending job file about the size of spool's (~400 bytes of YAML)."""
    spec = json.loads(payload)
    lines = [
        "format: 1",
        f"id: {spec['id']}",
        f"task: {spec['task']}",
        f"args: {json.dumps(spec['args'])}",
        "queue: default",
        "priority: 0",
        "max_tries: 3",
        "timeout_seconds: 3600",
        f"submitted_at: '{time.strftime('%Y-%m-%dT%H:%M:%S', time.gmtime())}.000000Z'",
        "attempt: 0",
        "tries: 0",
    ]
    return ("\n".join(lines) + "\n").encode().ljust(400, b" ")


def ingester(root: Path, producers: int, sync: str, cpu_ms: float) -> dict[str, Any]:
    disk = Disk(root)
    cursor_fd = prezeroed(root / "logs" / "cursors", 4096)
    watch = Inotify(root / "logs", IN_MODIFY)
    (root / "ready-ingest").touch()
    cpu0 = _cpu()
    logs: dict[int, int] = {}
    cursors = [0] * producers
    batches = ingested = 0
    while True:
        watch.drain()  # events from here on wake the next wait
        batch: list[tuple[int, bytes]] = []
        for me in range(producers):
            if me not in logs:
                try:
                    logs[me] = os.open(root / "logs" / f"p{me}.log", os.O_RDONLY)
                except FileNotFoundError:
                    continue
            raw = os.pread(logs[me], REC * (INGEST_MOST - len(batch)), cursors[me] * REC)
            for off in range(0, len(raw), REC):
                payload = parse(raw[off : off + REC])
                if payload is None:
                    break
                batch.append((me, payload))
                cursors[me] += 1
        if not batch:
            if (root / "stop").exists():
                break
            watch.wait(0.05)
            continue
        names = []
        for _me, payload in batch:
            burn(cpu_ms)
            name = json.loads(payload)["id"] + ".yaml"
            fd = disk.create("tmp", name, job_file(payload))
            if sync == "fsync":
                disk.fsync(fd)
            os.close(fd)
            names.append(name)
        if sync == "syncfs":
            disk.syncfs()
        for name in names:
            os.rename(name, name, src_dir_fd=disk.fd["tmp"], dst_dir_fd=disk.fd["pending"])  # noreplace in spool
        disk.fsync(disk.fd["pending"])  # the batch's one folder sync
        os.pwrite(cursor_fd, struct.pack(f"<{producers}Q", *cursors), 0)  # ingested up to here
        disk.fdatasync(cursor_fd)
        batches += 1
        ingested += len(batch)
    return {"calls": disk.calls, "cpu": _cpu() - cpu0, "batches": batches, "ingested": ingested}


class Worker:
    """One worker: batch claims, handlers inline, batched completions (spool's group commit)."""

    def __init__(self, root: Path, me: int, claim: str, cpu_ms: float, most: int, hold: float) -> None:
        self.root, self.me, self.claim_mode, self.cpu_ms = root, me, claim, cpu_ms
        self.most, self.hold = most, hold  # a claim's and a completion's most jobs; a result's longest wait
        self.disk = Disk(root)
        self.outbox: list[tuple[str, bytes]] = []
        self.due = float("inf")
        self.done = 0
        self.first: tuple[float, int] | None = None  # when the first batch of results was durable, its size
        self.last = 0.0
        self.claims = 0
        self.ready: list[str] = []  # the last listing of pending/, in this worker's order

    def run(self) -> dict[str, Any]:
        watch = Inotify(self.root / "pending", IN_MOVED_TO | IN_CREATE)
        (self.root / f"ready-w{self.me}").touch()
        cpu0 = _cpu()
        while True:
            watch.drain()
            claimed = self.claim()
            if not claimed:
                self.flush()  # nothing to run: save what waits before waiting
                if (self.root / "stop").exists():
                    break
                watch.wait(0.05)
                continue
            for name in claimed:
                if time.monotonic() >= self.due:
                    self.flush()
                self.attempt(name)
        return {
            "calls": self.disk.calls,
            "cpu": _cpu() - cpu0,
            "done": self.done,
            "first": self.first,
            "last": self.last,
            "claims": self.claims,
        }

    def claim(self) -> list[str]:
        d = self.disk
        if not self.ready:  # listed again only when used up: a deep pending/ is not listed per claim
            self.ready = sorted(os.listdir(d.fd["pending"]), reverse=not self.me % 2)
        claimed = []
        while self.ready and len(claimed) < self.most:
            name = self.ready.pop()  # worker 0 takes the oldest first, worker 1 the newest: they rarely meet
            try:
                d.move(name, "pending", "leased")  # the claim's commit point
            except FileNotFoundError:
                continue  # the other worker took it
            claimed.append(name)
        if not claimed:
            return []
        self.claims += 1
        if self.claim_mode == "rewrite":  # attempt, tries and the lease in the file
            fds = []
            for name in claimed:
                fd = os.open(name, os.O_RDONLY, dir_fd=d.fd["leased"])
                data = os.read(fd, 65536)
                os.close(fd)
                fds.append(d.create("tmp", name + ".claim", data + f"lease: w{self.me}\n".encode()))
            if len(fds) == 1:
                d.fsync(fds[0])
            else:
                d.syncfs()
            for fd in fds:
                os.close(fd)
            for name in claimed:
                os.replace(name + ".claim", name, src_dir_fd=d.fd["tmp"], dst_dir_fd=d.fd["leased"])
        d.fsync(d.fd["leased"])  # every try durable before any handler starts
        return claimed

    def attempt(self, name: str) -> None:
        fd = os.open(name, os.O_RDONLY, dir_fd=self.disk.fd["leased"])
        data = os.read(fd, 65536)
        os.close(fd)
        burn(self.cpu_ms)
        args = next(line for line in data.decode().splitlines() if line.startswith("args: "))[6:]
        if not self.outbox:
            self.due = time.monotonic() + self.hold
        self.outbox.append((name, json.dumps({"value": json.loads(args)}).encode()))
        if len(self.outbox) >= self.most:
            self.flush()

    def flush(self) -> None:
        waiting, self.outbox, self.due = self.outbox, [], float("inf")
        if not waiting:
            return
        d = self.disk
        fds = []
        for name, result in waiting:
            fds.append(d.create("tmp", name + ".result", result))
            fds.append(d.create("tmp", name + ".done", b"state: done\n"))
        if len(waiting) == 1:  # one job: spool's complete, an fsync of each file
            d.fsync(fds[0])
        else:
            d.syncfs()
        for name, _result in waiting:
            os.link(name + ".result", name, src_dir_fd=d.fd["tmp"], dst_dir_fd=d.fd["results"])  # exclusive
        d.fsync(d.fd["results"])  # the batch's results: done, acknowledged
        self.last, self.done = time.time(), self.done + len(waiting)
        self.first = self.first or (self.last, len(waiting))
        if len(waiting) == 1:
            d.fsync(fds[1])
        for fd in fds:
            os.close(fd)
        for name, _result in waiting:
            d.move(name + ".done", "tmp", "done", name)
        d.fsync(d.fd["done"])
        for name, _result in waiting:
            os.unlink(name, dir_fd=d.fd["leased"])
            os.unlink(name + ".result", dir_fd=d.fd["tmp"])


# -- one drain ---------------------------------------------------------------------------------


def jbd2_commits(path: Path) -> int | None:
    """Journal commits so far on the filesystem holding ``path`` (None: no journal, or not found)."""
    dev = os.stat(path).st_dev
    major, minor = os.major(dev), os.minor(dev)
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        if fields[2] == f"{major}:{minor}":
            source = fields[fields.index("-") + 2]
            info = Path("/proc/fs/jbd2") / f"{Path(source).name}-8" / "info"
            if info.exists():
                return int(info.read_text().split()[0])
    return None


NO_INGESTER: dict[str, Any] = {  # ``--submit file``'s ingester report: there is none
    "calls": {"fsync": 0, "fdatasync": 0, "syncfs": 0, "creations": 0, "shared": 0},
    "cpu": 0.0,
    "batches": 0,
    "ingested": 0,
}


def drain(work: Path, jobs: int, producers: int, o: Any, backlog: bool = False) -> dict[str, Any]:
    """One drain of the prototype; ``backlog``: shape (b), every job in pending/ before a worker starts."""
    root = work / f"spike-{producers}-{time.monotonic_ns()}"
    for name in FOLDERS:
        (root / name).mkdir(parents=True)
    cpu = o.cpu
    spawn = [sys.executable, str(THIS)]
    ingest = (
        subprocess.Popen(
            [*spawn, "_ingest", str(root), str(producers), o.ingest_sync, str(cpu["ingest"])], stdout=subprocess.PIPE
        )
        if o.submit == "log"
        else None
    )

    def start_workers() -> list[subprocess.Popen[bytes]]:
        batches = (str(o.batch_most), str(o.hold_ms / 1e3))
        return [
            subprocess.Popen(
                [*spawn, "_work", str(root), str(me), o.claim, str(cpu["worker"]), *batches], stdout=subprocess.PIPE
            )
            for me in range(2)
        ]

    workers = [] if backlog else start_workers()
    start_at = time.time() + 2.0 + 0.02 * jobs * REC / 1e6  # their logs pre-zeroed, the imports done
    share = [jobs // producers + (1 if i < jobs % producers else 0) for i in range(producers)]
    prods = [
        subprocess.Popen(
            [*spawn, "_produce", str(root), str(me), str(share[me]), str(start_at), str(cpu["producer"]), o.submit],
            stdout=subprocess.PIPE,
        )
        for me in range(producers)
    ]
    try:
        j0 = jbd2_commits(root)
        reports = [json.loads(p.communicate(timeout=o.timeout)[0]) for p in prods]
        deadline = time.monotonic() + o.timeout
        if backlog:  # the ingester (if any) turns the logs into files; then the workers start
            while len(os.listdir(root / "pending")) < jobs:
                if time.monotonic() > deadline or (ingest is not None and ingest.poll() is not None):
                    raise RuntimeError(f"spike: {len(os.listdir(root / 'pending'))} of {jobs} jobs loaded")
                time.sleep(0.01)
            j0, workers = jbd2_commits(root), start_workers()
        helpers = [p for p in (ingest, *workers) if p is not None]
        while len(os.listdir(root / "results")) < jobs:
            if time.monotonic() > deadline or any(p.poll() is not None for p in helpers):
                raise RuntimeError(f"spike: {len(os.listdir(root / 'results'))} of {jobs} results")
            time.sleep(0.01)
        j1 = jbd2_commits(root)
        (root / "stop").touch()
        ing = json.loads(ingest.communicate(timeout=60)[0]) if ingest is not None else NO_INGESTER
        ws = [json.loads(w.communicate(timeout=60)[0]) for w in workers]
    finally:
        for p in [*prods, *workers, *([ingest] if ingest is not None else [])]:
            if p.poll() is None:
                p.kill()
                p.wait()
    shutil.rmtree(root, ignore_errors=True)
    first, last = min(r["first"] for r in reports), max(w["last"] for w in ws)
    counted = jobs
    if backlog:  # timed from the first batch of results, as peers.shape_backlog times Huey's
        first, first_batch = min(tuple(w["first"]) for w in ws if w["first"])
        counted = jobs - first_batch

    def per_job(reports: list[dict[str, Any]]) -> dict[str, float]:
        keys = ("fsync", "fdatasync", "syncfs", "creations", "shared")
        return {k: sum(r["calls"][k] for r in reports) / jobs for k in keys}

    return {
        "jobs": jobs,
        "producers": producers,
        "drain": counted / max(last - first, 1e-6),
        "submits": jobs / (max(r["submitted"] for r in reports) - min(r["first"] for r in reports)),
        "submit_p50_ms": reports[0]["p50_ms"],
        "submit_p99_ms": reports[0]["p99_ms"],
        "calls_per_job": {"producers": per_job(reports), "ingester": per_job([ing]), "workers": per_job(ws)},
        "cpu_ms_per_job": {
            "producers": sum(r["cpu"] for r in reports) * 1000 / jobs,
            "ingester": ing["cpu"] * 1000 / jobs,
            "workers": sum(w["cpu"] for w in ws) * 1000 / jobs,
        },
        "ingest_batch": ing["ingested"] / max(ing["batches"], 1),
        "claim_batch": jobs / max(sum(w["claims"] for w in ws), 1),
        "journal_commits_per_job": (j1 - j0) / jobs if j0 is not None and j1 is not None else None,
    }


def huey(work: Path, jobs: int, producers: int, o: Any, backlog: bool = False) -> dict[str, Any]:
    """Huey's shape (a), (b) or (c) as ``benchmarks/peers.py`` runs it (SqliteHuey defaults, 2 workers)."""
    from benchmarks import peers

    s = peers.System("huey", work, None)
    s.fresh(f"spike-{producers}-{time.monotonic_ns()}")
    j0 = jbd2_commits(work)
    r = peers.shape_backlog(s, jobs, o.timeout) if backlog else peers.shape_live(s, jobs, producers, o.timeout)
    j1 = jbd2_commits(work)
    s.close()
    r["journal_commits_per_job"] = (j1 - j0) / jobs if j0 is not None and j1 is not None else None
    return r


def huey_syscalls(work: Path, jobs: int, o: Any) -> dict[str, Any]:
    """Huey's fsync-family calls per job over ``jobs`` of shape (a), counted with strace."""
    from benchmarks import peers

    s = peers.System("huey", work, None)
    s.fresh(f"strace-{time.monotonic_ns()}")
    r = peers.shape_strace(s, jobs, o.timeout)
    s.close()
    return r


NOT_SYNCS = ("creations", "shared")  # counted per job beside the syncs, not among them


def _calls(c: dict[str, float]) -> str:
    return " ".join(f"{k} {v:.2f}" for k, v in c.items() if v and k not in NOT_SYNCS) or "none"


def show(shape: str, s: dict[str, Any], h: dict[str, Any] | None, load: tuple[float, float]) -> None:
    ratio = f"  x Huey: drain {s['drain'] / h['drain']:.2f}, submits {s['submits'] / h['submits']:.2f}" if h else ""
    print(f"({shape}) {s['producers']} producer(s), load {load[0]:.2f} -> {load[1]:.2f}{ratio}")
    jc = s["journal_commits_per_job"]
    print(
        f"   spike  drain {s['drain']:7.0f}/s  submits {s['submits']:7.0f}/s  submit p50 {s['submit_p50_ms']:.3f} ms"
        f" p99 {s['submit_p99_ms']:.3f}  batches: ingest {s['ingest_batch']:.1f}, claim {s['claim_batch']:.1f}"
        + (f"  journal commits/job {jc:.2f}" if jc is not None else "")
    )
    calls = s["calls_per_job"]
    print(
        "          syncs/job: "
        + "; ".join(f"{role} {_calls(c)}" for role, c in calls.items())
        + f"  (all {sum(v for c in calls.values() for k, v in c.items() if k not in NOT_SYNCS):.2f})"
        + f"; creations/job {sum(c['creations'] for c in calls.values()):.2f}"
        + (f"; pending/ fsyncs skipped/job {calls['producers']['shared']:.2f}" if calls["producers"]["shared"] else "")
    )
    print("          CPU ms/job: " + ", ".join(f"{k} {v:.3f}" for k, v in s["cpu_ms_per_job"].items()))
    if h:
        jc = h["journal_commits_per_job"]
        print(
            f"   Huey   drain {h['drain']:7.0f}/s  submits {h['submits']:7.0f}/s"
            + (f"  submit p50 {h['submit_p50_ms']:.3f} ms p99 {h['submit_p99_ms']:.3f}" if "submit_p50_ms" in h else "")
            + f"  CPU ms/job {sum(h['cpu_ms'].values()):.3f}"
            + (f"  journal commits/job {jc:.2f}" if jc is not None else "")
        )


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    role = argv[:1]
    if role == ["_produce"]:
        args = argv[1:]
        out = producer(Path(args[0]), int(args[1]), int(args[2]), float(args[3]), float(args[4]), args[5])
    elif role == ["_ingest"]:
        out = ingester(Path(argv[1]), int(argv[2]), argv[3], float(argv[4]))
    elif role == ["_work"]:
        out = Worker(Path(argv[1]), int(argv[2]), argv[3], float(argv[4]), int(argv[5]), float(argv[6])).run()
    else:
        return run(argv)
    print(json.dumps(out), flush=True)
    return 0


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--dir", type=Path, default=None, help="the folder (and so the disk) to measure on")
    parser.add_argument("--jobs", type=int, default=3000)
    parser.add_argument("--shapes", default="a,c", help="a (1 producer), b (--backlog), c (--producers)")
    parser.add_argument("--backlog", type=int, default=10_000, help="shape (b)'s jobs, loaded before a worker starts")
    parser.add_argument("--producers", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2, help="each round alternates which system goes first")
    parser.add_argument(
        "--submit",
        choices=("log", "file", "shared"),
        default="log",
        help="file: SPEC.md's submit, no log; shared: and pending/'s fsync shared",
    )
    parser.add_argument("--ingest-sync", choices=("fsync", "syncfs"), default="fsync")
    parser.add_argument("--claim", choices=("rewrite", "rename"), default="rewrite")
    parser.add_argument("--batch-most", type=int, default=CLAIM_MOST, help="a claim's and a completion's most jobs")
    parser.add_argument("--hold-ms", type=float, default=HOLD_SECONDS * 1000, help="a result's longest wait for others")
    parser.add_argument("--cpu-ms", default="", help="producer=MS,ingest=MS,worker=MS burnt per job")
    parser.add_argument("--no-huey", action="store_true")
    parser.add_argument("--strace-huey", type=int, default=0, metavar="N", help="Huey's syncs over N jobs, each round")
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--json", action="store_true")
    o = parser.parse_args(argv)
    o.cpu = {"producer": 0.0, "ingest": 0.0, "worker": 0.0}
    for part in filter(None, o.cpu_ms.split(",")):
        key, _, value = part.partition("=")
        if key not in o.cpu:
            parser.error(f"--cpu-ms: unknown role {key!r} (producer, ingest, worker)")
        o.cpu[key] = float(value)
    work = Path(tempfile.mkdtemp(prefix="spool-spike-", dir=o.dir))
    print(
        f"spike_log, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: --dir {o.dir}, N = {o.jobs}, "
        f"backlog {o.backlog}, "
        f"submit {o.submit}, ingest sync {o.ingest_sync}, claim {o.claim}, batches of {o.batch_most}, "
        f"results held {o.hold_ms:g} ms, CPU burnt {o.cpu}"
    )
    results = []
    try:
        for i in range(o.rounds):
            for shape in o.shapes.split(","):
                producers = o.producers if shape == "c" else 1
                jobs, backlog = (o.backlog, True) if shape == "b" else (o.jobs, False)
                load0 = os.getloadavg()[0]
                sides = ["spike"] if o.no_huey else (["spike", "huey"] if i % 2 == 0 else ["huey", "spike"])
                got = {side: (drain if side == "spike" else huey)(work, jobs, producers, o, backlog) for side in sides}
                load = (load0, os.getloadavg()[0])
                show(shape, got["spike"], got.get("huey"), load)
                results.append({"round": i, "shape": shape, "load": load, "order": sides, **got})
            if o.strace_huey and not o.no_huey:
                counted = huey_syscalls(work, o.strace_huey, o)
                print(f"   Huey under strace, {o.strace_huey} jobs of (a): {json.dumps(counted)}")
                results.append({"round": i, "huey_strace": counted})
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if o.json:
        print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
