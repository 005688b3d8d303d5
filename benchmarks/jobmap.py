"""Where a job's time, syscalls, syncs and file creations go (issue 19's map).

    python benchmarks/jobmap.py drain  --dir DIR --jobs N [--rounds R] [--no-huey]
    python benchmarks/jobmap.py strace --dir DIR --jobs N
    python benchmarks/jobmap.py seam   --dir DIR --jobs N

- ``drain``: bench.py's end-to-end drain row (``spool run --workers 2`` up, one producer
  submitting N jobs one by one through ``Spool.submit``) and, in the same run on the same folder,
  Huey's (default poll); R rounds interleaved. Per round: drain/s, the ratio, CPU ms per job by
  process, and the journal commits per job (``/proc/fs/jbd2/<dev>/info``: every commit on the
  device, so only meaningful on an image nothing else writes to).
- ``strace``: every syscall of every process of ``spool run`` and of the producer over the same
  drain (``strace -ff``), counted per job, by kind and by role (the roles are read from /proc
  while the drain runs, thread ids included).
- ``seam``: submit, claim and complete in one process with a recording ``RealFS`` behind the
  ``spool.disk.fsio`` seam: each creation, rename, link, unlink, fsync, read and stat per job with
  the folder it touches and the spool code line that asked for it.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import bench  # noqa: E402
from benchmarks.claim_cost import swapped_fs  # noqa: E402
from benchmarks.throughput import Host, _role, open_spool  # noqa: E402
from spool import Spool  # noqa: E402
from spool.disk import fsio  # noqa: E402

_SYSCALL = re.compile(r"^(?:\d+\s+)?(?:<\.\.\. )?([a-z_0-9]+)\(", re.MULTILINE)
_TIMED = re.compile(r"^(?:\d+\s+)?([a-z_0-9]+)\(.*<([\d.]+)>$", re.MULTILINE)


def jbd2_info(path: Path) -> Path | None:
    """The jbd2 info file of the device ``path`` is on, if it has a journal."""
    source = bench.disk_info(path).get("source", "")
    name = os.path.basename(source)
    found = sorted(Path("/proc/fs/jbd2").glob(f"{name}-*")) if name else []
    return found[0] / "info" if found else None


def jbd2_commits(info: Path | None) -> int | None:
    if info is None:
        return None
    first = info.read_text().splitlines()[0]  # "N transactions (M requested), each up to ..."
    return int(first.split()[0])


def _options(o: argparse.Namespace) -> argparse.Namespace:
    return argparse.Namespace(timeout=o.timeout, pickups=0, recoveries=0, jobs=o.jobs)


def _drain_row(info: Path | None, jobs: int, run: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """One system's drain (bench.py's), with the journal commits it made per job."""
    before = jbd2_commits(info)
    done = run()
    after = jbd2_commits(info)
    return {
        "rate": done["rate"],
        "producer_rate": done["producer"]["rate"],
        "cpu_ms_per_job": done["cpu_ms_per_job"],
        "commits_per_job": None if before is None or after is None else (after - before) / jobs,
    }


def drain(o: argparse.Namespace, work: Path) -> dict[str, Any]:
    info = jbd2_info(work)
    rounds = []
    for n in range(o.rounds):
        row: dict[str, Any] = {"load": os.getloadavg()[0]}
        root = work / f"spool-{n}"
        Spool.init(root, environ={}).close()
        spool_run = partial(bench.spool_drain, work, root, _options(o), o.jobs, f"drain-{n}")
        row["spool"] = _drain_row(info, o.jobs, spool_run)
        shutil.rmtree(root, ignore_errors=True)
        if not o.no_huey and bench.huey_importable():
            huey_run = partial(bench.huey_drain, work, f"default poll {n}", [], _options(o))
            row["huey"] = _drain_row(info, o.jobs, huey_run)
            row["ratio"] = row["spool"]["rate"] / row["huey"]["rate"]
        rounds.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
    return {"disk": bench.disk_info(work), "jobs": o.jobs, "rounds": rounds, "load_after": os.getloadavg()}


# -- every syscall, by role -----------------------------------------------------------------------


def _roles_of(pids: list[int]) -> dict[int, str]:
    """Thread id -> role, for every thread of ``pids`` (strace -ff names its files by thread id)."""
    roles: dict[int, str] = {}
    for pid in pids:
        role = _role(pid)
        try:
            tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
        except OSError:
            tids = [pid]
        for tid in tids:
            roles[tid] = role
    return roles


def syscalls(o: argparse.Namespace, work: Path) -> dict[str, Any]:
    strace = shutil.which("strace")
    if strace is None:
        raise SystemExit("strace is not installed (apt-get install strace)")
    root = work / "strace-spool"
    Spool.init(root, environ={}).close()
    traces = work / "traces"
    traces.mkdir()
    wrap = [
        strace,
        "-ff",
        "-qq",
        "-T",
        *(["-k"] if o.stacks else []),
        *(["--seccomp-bpf", "-e", f"trace={o.calls}"] if o.calls else []),
    ]
    wrap.append("-o")
    host = Host(root, 2, work / "strace-run.log", wrap=[*wrap, str(traces / "run")])
    roles: dict[int, str] = {}
    start_at: dict[str, int] = {}
    try:
        bench.settle(lambda: bench.cpu_seconds_by_role(host.tree()), lambda cpu: {"coordinator", "worker"} <= set(cpu))
        roles.update(_roles_of(host.tree()))
        time.sleep(0.5)
        start_at = {path.name: path.stat().st_size for path in traces.iterdir()}  # start-up left out
        child = subprocess.Popen(
            [*wrap, str(traces / "producer"), sys.executable, str(bench.THIS), "_child", "drain-spool"]
            + [json.dumps({"root": str(root), "jobs": o.jobs, "timeout": o.timeout})],
            env=bench.process_env(),
            stdout=subprocess.PIPE,
            cwd=ROOT,
        )
        while child.poll() is None:  # attempt children may be replaced: keep reading the tree
            roles.update(_roles_of(host.tree()))
            time.sleep(0.2)
    finally:
        host.stop()
    by_role: dict[str, Counter[str]] = {}
    seconds: dict[str, Counter[str]] = {}
    for path in traces.iterdir():
        prefix, tid = path.name.split(".", 1)
        role = "producer" if prefix == "producer" else roles.get(int(tid), "other (exited)")
        with open(path, "rb") as trace:
            trace.seek(start_at.get(path.name, 0))
            text = trace.read().decode(errors="replace")
        by_role.setdefault(role, Counter()).update(_SYSCALL.findall(text))
        spent = seconds.setdefault(role, Counter())
        for name, took in _TIMED.findall(text):
            spent[name] += float(took)
    jobs = o.jobs + 1  # and the warm-up job
    out = {role: {k: round(v / jobs, 2) for k, v in c.most_common()} for role, c in sorted(by_role.items())}
    totals = {role: round(sum(c.values()) / jobs, 1) for role, c in by_role.items()}
    ms = {role: {k: round(v * 1000 / jobs, 3) for k, v in c.most_common(12)} for role, c in sorted(seconds.items())}
    return {
        "jobs": jobs,
        "traces": str(traces),
        "per_job_by_role": out,
        "total_per_job_by_role": totals,
        "ms_in_call_per_job_by_role": ms,
    }


# -- sampled profiles of every process (py-spy) ----------------------------------------------------


def profile(o: argparse.Namespace, work: Path) -> dict[str, Any]:
    """py-spy samples of every process of ``spool run`` and of the producer over one drain, as
    collapsed stacks (``--format raw``) in ``--out``: one file for the host, one for the producer."""
    spy = shutil.which("py-spy")
    if spy is None:
        raise SystemExit("py-spy is not installed (pip install py-spy)")
    out = Path(o.out or work)
    out.mkdir(parents=True, exist_ok=True)
    root = work / "profile-spool"
    Spool.init(root, environ={}).close()
    host = Host(root, 2, work / "profile-run.log")
    spy_args = ["--format", "raw", "--rate", str(o.rate), "--nonblocking", "--threads", *(["--gil"] if o.gil else [])]
    try:
        bench.settle(lambda: bench.cpu_seconds_by_role(host.tree()), lambda cpu: {"coordinator", "worker"} <= set(cpu))
        roles = {pid: _role(pid) for pid in host.tree()}
        sampler = subprocess.Popen(
            [spy, "record", "--subprocesses", "--pid", str(host.proc.pid), "-o", str(out / "host.txt"), *spy_args],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(1.0)
        producer = subprocess.run(
            [spy, "record", "-o", str(out / "producer.txt"), *spy_args, "--", sys.executable, str(bench.THIS)]
            + ["_child", "drain-spool", json.dumps({"root": str(root), "jobs": o.jobs, "timeout": o.timeout})],
            env=bench.process_env(),
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        )
        roles.update({pid: _role(pid) for pid in host.tree()})
        sampler.send_signal(signal.SIGINT)
        sampler.wait(60)
    finally:
        host.stop()
    drained = json.loads([line for line in producer.stdout.splitlines() if line.startswith("{")][-1])
    return {"out": str(out), "roles": roles, "rate": o.jobs / (drained["last"] - drained["first"])}


# -- the seam, with the asking line ----------------------------------------------------------------

_RECORDED = (
    "write_new",
    "rename_noreplace",
    "rename_replace",
    "link",
    "unlink",
    "fsync_dir",
    "fsync_file",
    "syncfs",
    "overwrite_small",
    "read_file",
    "exists",
    "lstat",
    "list_dir",
    "open_lock",
    "flock",
)


def _folder(fd: object) -> str:
    try:
        return os.path.basename(os.readlink(f"/proc/self/fd/{fd}"))
    except (OSError, TypeError):
        return "?"


def _asker() -> str:
    """The innermost spool frames outside spool/disk/ (where the call was decided)."""
    frames = [
        f"{Path(f.filename).relative_to(ROOT)}:{f.lineno}({f.name})"
        for f in traceback.extract_stack()
        if f.filename.startswith(str(ROOT / "spool")) and "/disk/" not in f.filename
    ]
    return " < ".join(reversed(frames[-2:]))


class RecordingFS(fsio.RealFS):
    """A ``RealFS`` that notes (phase, call, folder, asker) for every call it serves."""

    def __init__(self) -> None:
        super().__init__()
        self.phase = "setup"
        self.calls: Counter[tuple[str, str, str, str]] = Counter()


def _recorder(name: str) -> Any:
    real = getattr(fsio.RealFS, name)

    def call(self: RecordingFS, *args: Any, **kwargs: Any) -> Any:
        folder = _folder(args[0]) if args and isinstance(args[0], int) and name != "flock" else ""
        self.calls[(self.phase, name, folder, _asker())] += 1
        return real(self, *args, **kwargs)

    return call


for _name in _RECORDED:
    setattr(RecordingFS, _name, _recorder(_name))


_CPU: Counter[str] = Counter()  # seconds of this process's CPU per phase (``seam``)
_WALL: Counter[str] = Counter()


@contextmanager
def phase(fs: fsio.RealFS, name: str) -> Iterator[None]:
    if isinstance(fs, RecordingFS):
        fs.phase = name
    cpu, wall = time.process_time(), time.perf_counter()
    try:
        yield
    finally:
        _CPU[name] += time.process_time() - cpu
        _WALL[name] += time.perf_counter() - wall
        if isinstance(fs, RecordingFS):
            fs.phase = "between"


@contextmanager
def profiling(profiler: cProfile.Profile | None, out: str | None) -> Iterator[None]:
    """``seam --cprofile FILE``: the same loop under cProfile, without the recorder."""
    if profiler is None or out is None:
        yield
        return
    profiler.enable()
    try:
        yield
    finally:
        profiler.disable()
        profiler.dump_stats(out)


def seam(o: argparse.Namespace, work: Path) -> dict[str, Any]:
    from spool.moves.transitions import Lease, claim_held, complete

    root = work / "seam-spool"
    Spool.init(root, environ={}).close()
    recording = RecordingFS() if o.cprofile is None and not o.bare else fsio.RealFS()
    profiler = cProfile.Profile() if o.cprofile is not None else None
    with open_spool(root, o.jobs) as sp, swapped_fs(recording), profiling(profiler, o.cprofile):
        for n in range(o.jobs):
            with phase(recording, "submit"):
                sp.submit("echo", {"i": n})
        for _ in range(o.jobs):
            with phase(recording, "claim"):
                held = claim_held(sp, "map-worker", ["echo"])
            assert held is not None
            lease = Lease(held.job_file.id, "map-worker", held.job_file.attempt)
            with phase(recording, "complete"):
                complete(sp, lease, b'{"ok": true}', held)
    ms = {p: {"cpu_ms": _CPU[p] * 1000 / o.jobs, "wall_ms": _WALL[p] * 1000 / o.jobs} for p in _CPU}
    if not isinstance(recording, RecordingFS):
        return {"jobs": o.jobs, "cprofile": o.cprofile, "rows": [], "per_phase": ms}
    rows = [
        {"phase": p, "call": c, "folder": f, "per_job": n / o.jobs, "asker": a}
        for (p, c, f, a), n in sorted(recording.calls.items())
        if p in ("submit", "claim", "complete")
    ]
    return {"jobs": o.jobs, "rows": rows, "per_phase": ms}


def print_seam(r: dict[str, Any]) -> None:
    for row in r["rows"]:
        print(f"{row['phase']:9} {row['call']:17} {row['folder']:8} {row['per_job']:5.2f}  {row['asker']}")
    for name, times in r["per_phase"].items():
        print(f"{name:9} cpu {times['cpu_ms']:.3f} ms/job, wall {times['wall_ms']:.3f} ms/job")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("what", choices=("drain", "strace", "seam", "profile"))
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--no-huey", action="store_true")
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--out", default=None, help="profile: where py-spy's files go")
    parser.add_argument("--calls", default=None, help="strace: only these syscalls (strace's -e trace=)")
    parser.add_argument("--stacks", action="store_true", help="strace: -k (each call's native stack), with --keep")
    parser.add_argument("--bare", action="store_true", help="seam: time the phases with a plain RealFS")
    parser.add_argument("--cprofile", default=None, help="seam: profile the loop into this file instead")
    parser.add_argument("--gil", action="store_true", help="profile: only samples holding the GIL (CPU in Python)")
    parser.add_argument("--rate", type=int, default=250, help="profile: py-spy samples per second")
    o = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="spool-jobmap-", dir=o.dir))
    try:
        if o.what == "drain":
            report = drain(o, work)
        elif o.what == "strace":
            report = syscalls(o, work)
        elif o.what == "profile":
            report = profile(o, work)
        else:
            report = seam(o, work)
            if o.cprofile is None:
                print_seam(report)  # --bare: the per-phase times alone, with nothing recording
    finally:
        bench.kill_everything(work)
        if not o.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(report, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
