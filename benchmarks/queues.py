"""Issue 20: what queues and their limits cost the claim, measured in one run on one disk.

    python benchmarks/queues.py [--dir DIR] [--jobs N] [--repeats R] [--shapes a,a2,b,c,d]
        [--base CHECKOUT] [--sizes 1000,100000] [--claims 100] [--reserves 500]
        [--strace-jobs 200] [--json]

Three measurements, all in one work folder under ``--dir`` (so on one disk), removed at the end:

1. End-to-end drains, bench.py's shape: ``spool run --workers 2`` running, quiet and warmed up by
   one job; one producer process submits N ``echo`` jobs one by one; drain = N / (first submit ->
   the N-th ``complete`` in the ledger's history). One fresh spool per drain, for each shape:

   - ``a``: the default queue, no queues/ file; ``a2``: the same again, the noise yardstick
     (a2/a is what "within noise" means in this run);
   - ``b``: queue ``bench``, no queues/ file (unlimited);
   - ``c``: queue ``bench`` with ``concurrency: 1000`` (a limit that never binds: 2 workers);
   - ``d``: queue ``bench`` with ``concurrency: 1`` (binds: one job at a time over both workers;
     the most jobs leased at once, from the history's claim/complete rows, must be 1; its N is
     ``--binding-jobs``, 40: it runs about one job per worker poll, see docs/performance.md);
   - ``base`` (with ``--base CHECKOUT``): shape ``a`` run by that checkout's own ``spool``
     (its ``.venv/bin/python``, its folder first on PYTHONPATH), e.g. the commit before queues.

   Rounds are interleaved (a, a2, b, c, d, base, then again), each round starting one shape later
   than the one before, so drift in the machine's load falls on every shape alike. Per shape: the
   median, min and max; ratios of medians to ``a``, and the median of each round's own ratio.

2. The claim at ``--sizes`` pending (``claim_cost.py``'s spool, its jobs in queue ``bench``), in
   one process: real ``transitions.claim`` + ``complete``, in blocks that take turns between the
   queue with no file (unlimited), ``concurrency: 1000`` and ``concurrency: 1000`` + ``rate:
   1000000/s`` (limits that never bind). Per variant: claim p50/p99 (ms), the reservation inside
   it (``Ledger.reserve_many``, µs), the ledger statements per claim and per reservation (a
   sqlite3 trace callback on the ledger's connection, BEGIN and COMMIT counted), fsyncs per claim
   at the ``spool.disk.fsio`` seam; and ``--reserves`` reservations alone (each undone with
   ``Ledger.unreserve``, not timed), for a steadier µs.

3. Syscalls per job: ``strace -ff -z`` around ``spool run`` and the producer draining
   ``--strace-jobs`` jobs (+1 warm-up) for shapes ``a`` and ``c`` (and ``base``): fsync+fdatasync
   (and syncfs) per job, producer / spool run, and file creations per job (O_CREAT|O_EXCL,
   O_TMPFILE, mkdir), counted as bench.py counts them. n/a without strace.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import claim_cost  # noqa: E402
from benchmarks.bench import STRACE_CALLS, disk_info, parse_strace, settle  # noqa: E402
from benchmarks.procs import CHILDREN, kill, popen  # noqa: E402
from benchmarks.throughput import TASK_MODULES, Host, cpu_seconds_by_role, percentile, process_env  # noqa: E402
from spool import Spool, queues, registry  # noqa: E402
from spool.disk.layout import QUEUES, queue_file_name  # noqa: E402
from spool.moves.transitions import Lease, claim, complete  # noqa: E402

PRODUCER = Path(__file__).resolve().parent / "queue_producer.py"
QUEUE = "bench"
ROLES = ("coordinator", "worker", "attempt child", "supervisor")
CLAIM_VARIANTS: dict[str, dict[str, Any] | None] = {
    "unlimited": None,
    "concurrency 1000": {"concurrency": 1000},
    "conc 1000 + rate 1e6/s": {"concurrency": 1000, "rate": "1000000/s"},
}


@dataclass(frozen=True)
class Checkout:
    """A source tree whose ``spool`` runs: its folder and its interpreter."""

    root: Path
    python: str
    label: str

    def env(self) -> dict[str, str]:
        return {**process_env(), "PYTHONPATH": str(self.root)}


HERE = Checkout(ROOT, sys.executable, "this checkout")


def checkout_at(path: Path) -> Checkout:
    venv = path / ".venv" / "bin" / "python"
    rev = subprocess.run(["git", "-C", str(path), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return Checkout(path.resolve(), str(venv) if venv.exists() else sys.executable, rev.stdout.strip() or str(path))


@dataclass(frozen=True)
class Shape:
    key: str
    title: str
    queue: str | None
    concurrency: int | None
    checkout: Checkout


def shapes_of(keys: Sequence[str], base: Checkout | None) -> list[Shape]:
    known = {
        "a": Shape("a", "default queue, no queues/ file", None, None, HERE),
        "a2": Shape("a2", "the same again (noise yardstick)", None, None, HERE),
        "b": Shape("b", f"queue {QUEUE}, no queues/ file", QUEUE, None, HERE),
        "c": Shape("c", f"queue {QUEUE}, concurrency 1000", QUEUE, 1000, HERE),
        "d": Shape("d", f"queue {QUEUE}, concurrency 1 (binds)", QUEUE, 1, HERE),
    }
    if base is not None:
        known["base"] = Shape("base", f"default queue at {base.label}", None, None, base)
    unknown = [key for key in keys if key not in known]
    if unknown:
        raise SystemExit(f"unknown shapes {unknown}; known: {', '.join(known)}")
    return [known[key] for key in keys]


# -- processes of a checkout ------------------------------------------------------------------------


class CheckoutHost(Host):
    """``spool run --workers 2`` of ``checkout`` (its interpreter, its folder on PYTHONPATH)."""

    def __init__(self, checkout: Checkout, root: Path, log_path: Path, wrap: Sequence[str] = ()) -> None:
        imports = [arg for module in TASK_MODULES for arg in ("--import", module)]
        cmd = [*wrap, checkout.python, "-m", "spool.cli", "--spool", str(root), "run", "--workers", "2", *imports]
        self.log_path = log_path
        self.proc = popen(cmd, checkout.env(), log_path, cwd=checkout.root)  # -m: the cwd comes first


def producer(
    checkout: Checkout, args: Sequence[str], timeout: float, wrap: Sequence[str] = ()
) -> dict[str, Any] | None:
    """``queue_producer.py ARGS`` run by ``checkout``; its JSON line, if it printed one."""
    proc = popen([*wrap, checkout.python, str(PRODUCER), *args], checkout.env(), cwd=checkout.root)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill(proc, signal.SIGKILL)
        raise RuntimeError(f"the producer took more than {timeout:.0f}s") from None
    if proc.returncode != 0:
        raise RuntimeError(f"the producer failed ({proc.returncode}): {stderr.strip()[-3000:]}")
    lines = stdout.strip().splitlines()
    return json.loads(lines[-1]) if lines else None


def new_spool(shape: Shape, root: Path, timeout: float) -> None:
    producer(shape.checkout, ["init", str(root)], timeout)
    if shape.concurrency is not None:
        with Spool(root, environ={}) as sp:
            queues.set_limits(sp, QUEUE, concurrency=shape.concurrency)


def one_drain(work: Path, shape: Shape, label: str, jobs: int, timeout: float) -> dict[str, Any]:
    root = work / f"drain-{label}"
    new_spool(shape, root, timeout)
    load = os.getloadavg()
    host = CheckoutHost(shape.checkout, root, work / f"drain-{label}.log")
    try:
        up = settle(lambda: cpu_seconds_by_role(host.tree()), lambda cpu: {"coordinator", "worker"} <= set(cpu))
        cpu0 = up["cpu_s"]
        params = {"root": str(root), "jobs": jobs, "queue": shape.queue, "timeout": timeout}
        r = producer(shape.checkout, ["drain", json.dumps(params)], timeout + 60)
        assert r is not None
        cpu1 = cpu_seconds_by_role(host.tree())
        if not host.alive():
            raise RuntimeError(f"spool run exited ({host.proc.returncode}); see {host.log_path}")
    except BaseException:
        sys.stderr.write((work / f"drain-{label}.log").read_text(errors="replace")[-3000:])
        raise
    finally:
        host.stop()
        shutil.rmtree(root, ignore_errors=True)
    r["rate"] = jobs / (r["last"] - r["first"])
    r["load"] = load
    r["cpu_ms_per_job"] = {
        role: (cpu1[role] - cpu0.get(role, 0.0)) * 1000 / jobs for role in sorted(cpu1) if role in ROLES
    }
    r["cpu_ms_per_job"]["producer"] = r.pop("producer_cpu") * 1000 / jobs
    return r


def drains(work: Path, shapes: list[Shape], o: argparse.Namespace, say: Any) -> dict[str, Any]:
    runs: dict[str, list[dict[str, Any]]] = {shape.key: [] for shape in shapes}
    for round_ in range(o.repeats):
        turn = shapes[round_ % len(shapes) :] + shapes[: round_ % len(shapes)]
        for shape in turn:
            jobs = o.binding_jobs if shape.concurrency == 1 else o.jobs  # one at a time: fewer
            r = one_drain(work, shape, f"{shape.key}-{round_}", jobs, o.timeout)
            r["jobs"] = jobs
            r["round"] = round_
            runs[shape.key].append(r)
            say(f"round {round_} {shape.key}: {r['rate']:.1f} jobs/s (load {r['load'][0]:.1f})")
    return {"shapes": {s.key: s.title for s in shapes}, "runs": runs, "summary": summarize(runs)}


def summarize(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, rs in runs.items():
        rates = [r["rate"] for r in rs]
        median = statistics.median(rates)
        roles = rs[0]["cpu_ms_per_job"]
        cpu = {role: statistics.median(r["cpu_ms_per_job"].get(role, 0.0) for r in rs) for role in roles}
        out[key] = {
            "rates": rates,
            "median": median,
            "min": min(rates),
            "max": max(rates),
            "spread": (max(rates) - min(rates)) / median,
            "cpu_ms_per_job": cpu,
            "most_leased": max(r["most_leased"] for r in rs),
        }
    if "a" in runs:
        a_by_round = {r["round"]: r["rate"] for r in runs["a"]}
        for key, rs in runs.items():
            paired = [r["rate"] / a_by_round[r["round"]] for r in rs if r["round"] in a_by_round]
            out[key]["to_a"] = out[key]["median"] / out["a"]["median"]
            out[key]["to_a_paired"] = statistics.median(paired)
            out[key]["to_a_paired_all"] = paired
    return out


# -- the claim, unlimited and limited ---------------------------------------------------------------


def _set_variant(sp: Spool, limits: dict[str, Any] | None) -> None:
    if limits is None:
        try:
            os.unlink(sp.layout.path(QUEUES) / queue_file_name(QUEUE))
        except FileNotFoundError:
            pass
        queues.sync(sp)
        assert QUEUE not in sp.ledger.queue_limit_rows()
    else:
        queues.set_limits(sp, QUEUE, clear=True, **limits)


def claim_costs(work: Path, size: int, claims: int, reserves: int, blocks: int) -> dict[str, Any]:
    import examples.tasks  # noqa: F401  (echo, as a worker would import it)

    root = work / f"claims-{size}"
    build_s = claim_cost.build_spool(root, size, queue=QUEUE)
    tasks = sorted(registry.registered())
    counting = claim_cost.CountingFS()
    kinds = ("claim_ms", "reserve_us", "claim_statements", "reserve_statements", "fsyncs", "alone_us")
    found: dict[str, dict[str, list[float]]] = {v: {k: [] for k in kinds} for v in CLAIM_VARIANTS}
    statements = Counter[str]()
    try:
        with Spool(root, environ={}) as sp, claim_cost.swapped_fs(counting):
            ledger = sp.ledger
            reserve_many = ledger.reserve_many
            db: sqlite3.Connection = ledger._db  # type: ignore[assignment]
            db.set_trace_callback(lambda _sql: statements.update(["all"]))
            reserve_time: list[float] = []

            def timed_reserve(*args: Any, **kwargs: Any) -> Any:
                before, t0 = statements["all"], time.perf_counter()
                try:
                    return reserve_many(*args, **kwargs)
                finally:
                    reserve_time.append(time.perf_counter() - t0)
                    statements["reserve"] += statements["all"] - before

            ledger.reserve_many = timed_reserve  # type: ignore[method-assign]
            names = list(CLAIM_VARIANTS)
            for block in range(blocks):
                for variant in names[block % len(names) :] + names[: block % len(names)]:
                    _set_variant(sp, CLAIM_VARIANTS[variant])
                    got = found[variant]
                    for _ in range(max(1, claims // blocks)):
                        statements.clear()
                        reserve_time.clear()
                        counting.calls.clear()
                        t0 = time.perf_counter()
                        job_file = claim(sp, "bench-worker", tasks)
                        got["claim_ms"].append((time.perf_counter() - t0) * 1000)
                        if job_file is None:
                            raise SystemExit("ran out of ready jobs: --claims is too large for the size")
                        got["reserve_us"].append(sum(reserve_time) * 1e6)
                        got["claim_statements"].append(statements["all"])
                        got["reserve_statements"].append(statements["reserve"])
                        got["fsyncs"].append(counting.calls["fsync"])
                        complete(sp, Lease(job_file.id, "bench-worker", job_file.attempt), b'{"ok": true}')
                    for _ in range(max(1, reserves // blocks)):
                        t0 = time.perf_counter()
                        reservation = reserve_many(tasks, 1)
                        got["alone_us"].append((time.perf_counter() - t0) * 1e6)
                        for job_id in reservation.ids:
                            ledger.unreserve(job_id)
            db.set_trace_callback(None)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    out: dict[str, Any] = {"size": size, "build_s": build_s, "variants": {}}
    for variant, got in found.items():
        out["variants"][variant] = {
            "claims": len(got["claim_ms"]),
            "claim_p50_ms": percentile(got["claim_ms"], 0.5),
            "claim_p99_ms": percentile(got["claim_ms"], 0.99),
            "reserve_p50_us": percentile(got["reserve_us"], 0.5),
            "alone_p50_us": percentile(got["alone_us"], 0.5),
            "alone_p90_us": percentile(got["alone_us"], 0.9),
            "alone": len(got["alone_us"]),
            "claim_statements": statistics.mean(got["claim_statements"]),
            "reserve_statements": statistics.mean(got["reserve_statements"]),
            "fsyncs_per_claim": statistics.mean(got["fsyncs"]),
        }
    return out


# -- syscalls per job --------------------------------------------------------------------------------


def syscalls(work: Path, shape: Shape, jobs: int, timeout: float) -> dict[str, Any]:
    strace = shutil.which("strace")
    assert strace is not None
    root = work / f"strace-{shape.key}"
    new_spool(shape, root, timeout)
    wrap = [strace, "-ff", "-z", "-qq", "-e", f"trace={STRACE_CALLS}", "-o"]
    run_out, producer_out = work / f"strace-{shape.key}-run.txt", work / f"strace-{shape.key}-producer.txt"
    host = CheckoutHost(shape.checkout, root, work / f"strace-{shape.key}.log", wrap=[*wrap, str(run_out)])
    try:
        params = {"root": str(root), "jobs": jobs, "queue": shape.queue, "timeout": timeout}
        producer(shape.checkout, ["drain", json.dumps(params)], timeout + 60, wrap=[*wrap, str(producer_out)])
    finally:
        host.stop()
        shutil.rmtree(root, ignore_errors=True)
    made, run = parse_strace(producer_out), parse_strace(run_out)
    for path in work.glob(f"strace-{shape.key}-*.txt.*"):
        path.unlink()
    n = jobs + 1  # and the warm-up job
    both = made + run

    def syncs(c: Counter[str]) -> float:
        return (c["fsync"] + c["fdatasync"] + c["sync_file_range"] + c["syncfs"]) / n

    return {
        "jobs": n,
        "producer": dict(made),
        "run": dict(run),
        "fsyncs_per_job": syncs(both),
        "fsyncs_producer_per_job": syncs(made),
        "fsyncs_run_per_job": syncs(run),
        "creations_per_job": (both["O_CREAT|O_EXCL"] + both["O_TMPFILE"] + both["mkdir"]) / n,
        "creat_no_excl_per_job": both["O_CREAT (no O_EXCL)"] / n,
        "renames_per_job": (both["rename"] + both["renameat2"]) / n,
    }


# -- the run ---------------------------------------------------------------------------------------


def measure(work: Path, o: argparse.Namespace, say: Any) -> dict[str, Any]:
    """Every section, in ``work`` (made if missing; removed by the caller)."""
    work.mkdir(exist_ok=True)
    base = checkout_at(o.base) if o.base else None
    keys = [key for key in o.shapes.split(",") if key] + (["base"] if base and "base" not in o.shapes else [])
    shapes = shapes_of(keys, base)
    report: dict[str, Any] = {
        "jobs": o.jobs,
        "binding_jobs": o.binding_jobs,
        "repeats": o.repeats,
        "load_before": os.getloadavg(),
    }
    if base is not None:
        report["base"] = {"root": str(base.root), "label": base.label, "python": base.python}
    if o.repeats and shapes:
        report["drains"] = drains(work, shapes, o, say)
    report["claims"] = []
    for size in o.sizes:
        report["claims"].append(claim_costs(work, size, o.claims, o.reserves, o.blocks))
        say(f"claims at {size} pending done")
    if o.strace_jobs and shutil.which("strace"):
        report["strace"] = {}
        for shape in shapes_of(["a", "c"] + (["base"] if base else []), base):
            report["strace"][shape.key] = syscalls(work, shape, o.strace_jobs, o.timeout)
            say(f"strace {shape.key} done")
    elif o.strace_jobs:
        report["strace"] = None
    report["load_after"] = os.getloadavg()
    return report


def print_table(r: dict[str, Any], out: TextIO) -> None:
    print(
        f"\nqueues (issue 20): {os.cpu_count()} cores, load {r['load_before'][0]:.1f} before / "
        f"{r['load_after'][0]:.1f} after, N = {r['jobs']}, {r['repeats']} rounds",
        file=out,
    )
    if "base" in r:
        print(f"  base = {r['base']['label']} ({r['base']['root']}, {r['base']['python']})", file=out)
    dr = r.get("drains")
    if dr:
        s = dr["summary"]
        print(
            f"  {'drain, 2 workers, jobs/s':<44} {'median':>7} {'min':>7} {'max':>7} {'spread':>7}"
            f" {'/a':>6} {'/a paired':>9} {'most leased':>11}  CPU ms/job",
            file=out,
        )
        for key, title in dr["shapes"].items():
            row = s[key]
            ratio = f"{row['to_a']:6.3f} {row['to_a_paired']:9.3f}" if "to_a" in row else f"{'-':>6} {'-':>9}"
            cpu = ", ".join(f"{k} {v:.1f}" for k, v in row["cpu_ms_per_job"].items())
            print(
                f"  {key + ': ' + title:<44} {row['median']:7.1f} {row['min']:7.1f} {row['max']:7.1f}"
                f" {row['spread'] * 100:6.1f}% {ratio} {row['most_leased']:>11}  {cpu}",
                file=out,
            )
        loads = [run["load"][0] for runs in dr["runs"].values() for run in runs]
        print(f"  load (1 min) at each drain's start: {min(loads):.1f} to {max(loads):.1f}", file=out)
    for c in r["claims"]:
        print(
            f"\n  claim at {c['size']:,} pending (queue {QUEUE}, built in {c['build_s']:.0f}s)"
            f"   {'claims':>6} {'p50 ms':>7} {'p99 ms':>7} {'reserve p50 µs':>14} {'alone p50 µs':>12}"
            f" {'alone p90 µs':>12} {'stmts/claim':>11} {'stmts/reserve':>13} {'fsyncs':>6}",
            file=out,
        )
        for name, v in c["variants"].items():
            print(
                f"    {name:<52} {v['claims']:>6} {v['claim_p50_ms']:7.2f} {v['claim_p99_ms']:7.2f}"
                f" {v['reserve_p50_us']:14.0f} {v['alone_p50_us']:12.0f} {v['alone_p90_us']:12.0f}"
                f" {v['claim_statements']:11.1f} {v['reserve_statements']:13.1f} {v['fsyncs_per_claim']:6.1f}",
                file=out,
            )
    st = r.get("strace")
    if st:
        print(
            f"\n  {'strace, per job':<44} {'syncs':>6} {'producer':>8} {'spool run':>9} {'creations':>9}"
            f" {'O_CREAT no EXCL':>15} {'renames':>7}",
            file=out,
        )
        for key, v in st.items():
            print(
                f"  {key + ' (' + str(v['jobs']) + ' jobs)':<44} {v['fsyncs_per_job']:6.2f}"
                f" {v['fsyncs_producer_per_job']:8.2f} {v['fsyncs_run_per_job']:9.2f} {v['creations_per_job']:9.2f}"
                f" {v['creat_no_excl_per_job']:15.2f} {v['renames_per_job']:7.2f}",
                file=out,
            )
    elif "strace" in r:
        print("\n  strace: n/a (not installed)", file=out)


def add_options(parser: argparse.ArgumentParser, prefix: str = "") -> None:
    """The options, also under ``bench.py --queues`` (with ``prefix`` ``queues-``)."""
    parser.add_argument(f"--{prefix}repeats", type=int, default=5, help="rounds of the drains (0: none)")
    parser.add_argument(f"--{prefix}shapes", default="a,a2,b,c,d", help="drain shapes, comma-separated")
    parser.add_argument(f"--{prefix}binding-jobs", type=int, default=40, help="N of shape d's drains")
    parser.add_argument(f"--{prefix}base", type=Path, default=None, help="a checkout to run shape a with too")
    parser.add_argument(
        f"--{prefix}sizes",
        type=lambda text: [int(n.replace("_", "")) for n in text.split(",") if n],
        default=[1000, 100_000],
        help="pending jobs of the claim rows",
    )
    parser.add_argument(f"--{prefix}claims", type=int, default=100, help="timed claims per variant and size")
    parser.add_argument(f"--{prefix}reserves", type=int, default=500, help="reservations alone per variant")
    parser.add_argument(f"--{prefix}blocks", type=int, default=5, help="turns each variant takes")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--dir", type=Path, default=None, help="the folder (and so the disk) to measure on")
    parser.add_argument("--jobs", type=int, default=1000, help="N of each drain")
    parser.add_argument("--strace-jobs", type=int, default=200, help="jobs drained under strace (0: skip)")
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument("--json", action="store_true", help="also print the whole report as one JSON line")
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    add_options(parser)
    o = parser.parse_args(argv)

    def stop(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGHUP, stop)

    def say(text: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)

    work = Path(tempfile.mkdtemp(prefix="spool-queues-", dir=o.dir))
    disk = disk_info(work)
    say(f"in {work} ({disk['source']} {disk['fstype']}, journal {disk['journal']})")
    try:
        report = measure(work, o, say)
    finally:
        for proc in CHILDREN:
            kill(proc, signal.SIGKILL)
        if o.keep:
            say(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    report["disk"] = disk
    report["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    print(
        f"spool queues bench, {report['date']}; disk: {disk['source']} mounted at {disk['mount']}, {disk['fstype']},"
        f" journal: {disk['journal']}",
    )
    print_table(report, sys.stdout)
    if o.json:
        print(json.dumps(report, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
