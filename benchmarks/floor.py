"""The floor: the fastest drain any design could reach on this disk while keeping every promise.

    python benchmarks/floor.py --dir DIR [--jobs N] [--no-huey] [--json]

It runs no spool code. In plain Python with ``os`` calls it does, per job, only the system calls
the promised life of a job needs under the durability recipe (a file's data is durable after its
fsync; a name after an fsync of its folder; ``syncfs(2)`` makes everything issued before it
durable, and says nothing about what follows), with the end-to-end drain's shape: two consumer
processes already running, one producer submitting N jobs one by one, each acknowledged on its
own; drain = N / (first submit -> N-th result durable). Huey's drain is measured the same way in
the same run, on the same folder (``bench.huey_drain``).

A job's promised steps, what each needs before it is acknowledged, and whether one sync can
cover several jobs:

- submit: the file's data synced, THEN its name (a name that outlives its data may come back
  as an empty or torn job). Not shared: each submit is acknowledged on its own, by one
  producer; that is what "one by one" means (``submit_many`` shares).
- claim, the try counted: the rename pending/ -> leased/ durable before the handler starts (a
  file in leased/ is a spent try for whoever recovers; the success path needs no rewrite of
  its content). Shared: with syncfs one sync covers the previous job's result and this claim.
- result, create-exclusive: staged in tmp/, its data synced, THEN linked into results/ (the
  link is the exclusive create: the first result wins) and that name synced. The data's sync
  is not shared (it follows the handler and precedes the link); the name's is, with the next
  claim's.
- move to done: after the result's name is durable (done/ never holds a job without its
  result), the rename leased/ -> done/, durable. Shared: it rides on the process's next sync
  (the result already says the job is done; recovery finishes the move).

Three ways, each printed as a row:

- ``fsync``: the POSIX way, one job at a time. Producer 2 fsyncs per job (file, pending/); each
  consumer 4 (leased/; the result file, results/; done/). Folders differ, so nothing is shared.
- ``syncfs``: the same order with ``syncfs`` as the barrier, pipelined across a consumer's jobs:
  producer 2 per job (data, name); each consumer 2 per job: [result k's data + done move of
  k-1] and [result k's link + claim of k+1].
- ``checked``: files that carry a hash of their content (``sealed``), so a file torn by a power
  cut is known for one that was never acknowledged, and one barrier covers a file's data and
  name together: producer 1 syncfs per job; each consumer 1 per job ([result k's data and link,
  the done move of k-1, the claim of k+1]). This is the floor: every step above needs its
  barrier before it is acknowledged, and only these can be shared.

Each row prints jobs/s, CPU ms per job by process, syncs per job by process (counted here: they
are this script's own calls), and the producer's rate alone with nothing consuming (Huey's: its
enqueue rate, as bench.py measures it).
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

THIS = Path(__file__).resolve()
MODES = ("fsync", "syncfs", "checked")
FOLDERS = ("tmp", "pending", "leased", "results", "done")
_libc = ctypes.CDLL(None, use_errno=True)


class Disk:
    """The spool-like folder, with this process's syncs counted."""

    def __init__(self, root: Path, mode: str) -> None:
        self.mode = mode
        self.fd = {name: os.open(root / name, os.O_RDONLY | os.O_DIRECTORY) for name in FOLDERS}
        self.syncs = 0

    def fsync(self, fd: int) -> None:
        os.fsync(fd)
        self.syncs += 1

    def syncfs(self) -> None:
        if _libc.syncfs(self.fd["tmp"]) != 0:
            raise OSError(ctypes.get_errno(), "syncfs failed")
        self.syncs += 1

    def write_tmp(self, name: str, data: bytes, *, sync: bool) -> None:
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600, dir_fd=self.fd["tmp"])
        try:
            os.write(fd, data)
            if sync:
                self.fsync(fd)
        finally:
            os.close(fd)

    def move(self, name: str, src: str, dst: str) -> None:
        os.rename(name, name, src_dir_fd=self.fd[src], dst_dir_fd=self.fd[dst])


def sealed(payload: dict[str, Any]) -> bytes:
    """``checked`` mode's files end with a hash of their content: one torn by a power cut (its
    name durable, its data not) is recognised and treated as never written (it never was
    acknowledged), so one barrier can cover the data and the name together."""
    body = json.dumps(payload).encode()
    return body + b"\n" + hashlib.sha256(body).hexdigest().encode()


def opened(data: bytes) -> Any:
    body, _, seal = data.rpartition(b"\n")
    if hashlib.sha256(body).hexdigest().encode() != seal:
        raise ValueError("torn")
    return json.loads(body)


def submit(disk: Disk, n: int) -> None:
    """One acknowledged submit: data synced, then the name (``checked``: both in one sync)."""
    name = f"{n:08d}.job"
    data = sealed({"id": name, "task": "echo", "args": {"i": n}})
    disk.write_tmp(name, data, sync=disk.mode == "fsync")
    if disk.mode == "syncfs":
        disk.syncfs()  # the data, before the name can exist
    disk.move(name, "tmp", "pending")
    if disk.mode == "fsync":
        disk.fsync(disk.fd["pending"])
    else:
        disk.syncfs()  # the name (checked: and the data): acknowledged


def consume(root: Path, mode: str, me: int) -> dict[str, Any]:
    """Claim, run, result and done until ``root``/stop exists; then report."""
    disk = Disk(root, mode)
    (root / f"ready-{me}").touch()
    backlog: list[str] = []
    done = 0
    last = 0.0
    to_done: list[str] = []  # syncfs: jobs whose result name rides on the next sync
    moved: list[str] = []  # syncfs: done moves that ride on the next sync
    while True:
        if not backlog:
            backlog = sorted(os.listdir(disk.fd["pending"]), reverse=bool(me % 2))
        if not backlog:
            if to_done or moved:  # idle: nothing to share the barrier with, so sync alone
                disk.syncfs()
                last, done = _finish(disk, to_done, moved, last, done)
                continue
            if (root / "stop").exists():
                break
            time.sleep(0.0005)
            continue
        name = backlog.pop()
        try:
            disk.move(name, "pending", "leased")  # the claim: only one consumer's rename succeeds
        except FileNotFoundError:
            continue
        if mode == "fsync":
            disk.fsync(disk.fd["leased"])  # the try counted, before the handler starts
        else:
            disk.syncfs()  # this claim, and the previous job's result name (shared)
            last, done = _finish(disk, to_done, moved, last, done)
        fd = os.open(name, os.O_RDONLY, dir_fd=disk.fd["leased"])  # the handler reads its args
        args = opened(os.read(fd, 65536))["args"]
        os.close(fd)
        result = sealed({"value": args})
        staged = f"{name}.result"
        disk.write_tmp(staged, result, sync=mode == "fsync")
        if mode == "syncfs":
            disk.syncfs()  # the result's data, before its name; and the previous done move (shared)
            moved.clear()
        os.link(staged, name, src_dir_fd=disk.fd["tmp"], dst_dir_fd=disk.fd["results"])  # exclusive
        os.unlink(staged, dir_fd=disk.fd["tmp"])
        if mode == "fsync":
            disk.fsync(disk.fd["results"])  # the result: acknowledged
            disk.move(name, "leased", "done")
            disk.fsync(disk.fd["done"])
            done, last = done + 1, time.time()
        else:
            to_done.append(name)  # acknowledged at the next sync, then moved to done/
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {"done": done, "last": last, "cpu": usage.ru_utime + usage.ru_stime, "syncs": disk.syncs}


def _finish(disk: Disk, to_done: list[str], moved: list[str], last: float, done: int) -> tuple[float, int]:
    """After a sync: the results it made durable are acknowledged; their jobs move to done/
    (each move durable at this process's next sync)."""
    if to_done:
        last, done = time.time(), done + len(to_done)
    moved.clear()
    for name in to_done:
        disk.move(name, "leased", "done")
        moved.append(name)
    to_done.clear()
    return last, done


def make_folders(root: Path) -> None:
    for name in FOLDERS:
        (root / name).mkdir(parents=True)


def floor_submits(work: Path, mode: str, jobs: int) -> float:
    """The producer alone, nothing consuming: acknowledged submits per second."""
    root = work / f"floor-submit-{mode}"
    make_folders(root)
    disk = Disk(root, mode)
    started = time.perf_counter()
    for n in range(jobs):
        submit(disk, n)
    return jobs / (time.perf_counter() - started)


def floor_drain(work: Path, mode: str, jobs: int) -> dict[str, Any]:
    root = work / f"floor-{mode}"
    make_folders(root)
    consumers = [
        subprocess.Popen([sys.executable, str(THIS), "_consume", str(root), mode, str(me)], stdout=subprocess.PIPE)
        for me in range(2)
    ]
    try:
        deadline = time.monotonic() + 30
        while not all((root / f"ready-{me}").exists() for me in range(2)):
            if time.monotonic() > deadline:
                raise RuntimeError("the floor's consumers did not start")
            time.sleep(0.01)
        disk = Disk(root, mode)
        cpu0 = _cpu_self()
        first = time.time()
        for n in range(jobs):
            submit(disk, n)
        submitted, producer_cpu = time.time(), _cpu_self() - cpu0
        while len(os.listdir(disk.fd["done"])) < jobs:
            time.sleep(0.01)
        (root / "stop").touch()
        reports = [json.loads(proc.communicate(timeout=60)[0]) for proc in consumers]
    finally:
        for proc in consumers:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    last = max(r["last"] for r in reports)
    return {
        "rate": jobs / (last - first),
        "producer_rate": jobs / (submitted - first),
        "cpu_ms_per_job": {
            "producer": producer_cpu * 1000 / jobs,
            "consumers": sum(r["cpu"] for r in reports) * 1000 / jobs,
        },
        "syncs_per_job": {"producer": disk.syncs / jobs, "consumers": sum(r["syncs"] for r in reports) / jobs},
    }


def _cpu_self() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["_consume"]:
        print(json.dumps(consume(Path(argv[1]), argv[2], int(argv[3]))), flush=True)
        return 0
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--dir", type=Path, default=None, help="the folder (and so the disk) to measure on")
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--no-huey", action="store_true")
    parser.add_argument("--json", action="store_true")
    o = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="spool-floor-", dir=o.dir))
    report: dict[str, Any] = {"dir": str(o.dir or tempfile.gettempdir()), "jobs": o.jobs}
    try:
        from benchmarks import bench  # the Huey side, measured as the bench measures it

        report["disk"] = bench.disk_info(work)
        report["load_before"] = os.getloadavg()[0]
        for mode in MODES:
            report[mode] = floor_drain(work, mode, o.jobs)
            report[mode]["submit_alone"] = floor_submits(work, mode, o.jobs)
        if not o.no_huey and bench.huey_importable():
            opts = argparse.Namespace(jobs=o.jobs, timeout=600.0, pickups=0)
            report["huey"] = bench.huey_drain(work, "default poll", bench.HUEY_POLLS["default poll"], opts)
            env = bench.huey_env(work / "huey-submit.db")
            report["huey"]["submit_alone"] = bench.run_child("submit-huey", {"jobs": o.jobs}, 600.0, env=env)["rate"]
        report["load_after"] = os.getloadavg()[0]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print_table(report)
    if o.json:
        print(json.dumps(report))
    return 0


def print_table(r: dict[str, Any]) -> None:
    huey = r.get("huey", {}).get("rate")
    print(
        f"floor, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: --dir {r['dir']}, N = {r['jobs']}, "
        f"load {r['load_before']:.1f} before / {r['load_after']:.1f} after"
    )
    d = r["disk"]
    print(f"disk: {d['source']} mounted at {d['mount']}, {d['fstype']}, journal: {d['journal']}")
    head = f"  {'':34}{'drain/s':>9}{'x Huey':>8}{'producer/s':>12}  {'CPU ms/job':22}  syncs/job"
    print(f"{head}{'submit alone/s':>29}")
    for mode in MODES:
        m = r[mode]
        cpu, syncs = m["cpu_ms_per_job"], m["syncs_per_job"]
        ratio = f"{m['rate'] / huey:.2f}" if huey else "-"
        print(
            f"  floor, {mode + ' barriers':26}{m['rate']:9.0f}{ratio:>8}{m['producer_rate']:12.0f}  "
            f"{'prod {:.2f}, cons {:.2f}'.format(cpu['producer'], cpu['consumers']):22}  "
            f"prod {syncs['producer']:.2f}, cons {syncs['consumers']:.2f}"
            f"{m.get('submit_alone', 0):>16.0f}"
        )
    if huey:
        cpu = r["huey"]["cpu_ms_per_job"]
        print(
            f"  {'Huey SqliteHuey, default poll':34}{huey:9.0f}{'1.00':>8}{r['huey']['producer']['rate']:12.0f}  "
            + ", ".join(f"{k} {v:.2f}" for k, v in sorted(cpu.items()))
            + f"   enqueue alone {r['huey'].get('submit_alone', 0):.0f}/s"
        )
        print(f"  {'target (1.5 x Huey)':34}{1.5 * huey:9.0f}")


if __name__ == "__main__":
    sys.exit(main())
