"""The benchmarks still run: each one at a tiny size, as a real process, so they cannot rot.

They print numbers, not verdicts; these tests check only that every number is there and that
the work they measured really happened (every job drained, one file read per claim).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from support import ROOT


def _run_benchmark(tmp_path: Path, script: str, *args: str, timeout: float = 300.0) -> subprocess.CompletedProcess[str]:
    try:
        done = subprocess.run(
            [sys.executable, str(ROOT / "benchmarks" / script), "--dir", str(tmp_path), *args],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    finally:
        _kill_leftovers(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def _kill_leftovers(tmp_path: Path) -> None:
    """SIGKILL, by pid, any process still running on this test's spools (a benchmark that timed out)."""
    marker = str(tmp_path).encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if marker in (entry / "cmdline").read_bytes():
                os.kill(int(entry.name), signal.SIGKILL)
        except (OSError, ProcessLookupError):
            continue


def test_claim_cost_prints_a_row_per_size(tmp_path: Path) -> None:
    done = _run_benchmark(tmp_path, "claim_cost.py", "--sizes", "40,80", "--claims", "5")
    ms = r"([\d.]+) ms"
    row = rf"^\s+(\d+)\s+(\d+)\s+{ms}\s+{ms}\s+([\d.]+)\s+{ms}\s+{ms}\s+{ms}$"
    rows = re.findall(row, done.stdout, re.MULTILINE)
    assert [(size, claims) for size, claims, *_ in rows] == [("40", "5"), ("80", "5")], done.stdout
    for _size, _claims, p50, p99, files_read, *_rest in rows:
        assert 0 < float(p50) <= float(p99)
        assert float(files_read) == 1, "a claim reads one job file (the one it takes)"
    assert list(tmp_path.iterdir()) == [], "the built spools are removed without --keep"


def test_throughput_drains_every_job_and_prints_the_table(tmp_path: Path) -> None:
    strace_jobs = "5" if shutil.which("strace") else "0"
    done = _run_benchmark(
        tmp_path,
        "throughput.py",
        "--jobs",
        "20",
        "--workers",
        "2",
        "--cli-submits",
        "1",
        "--pickups",
        "3",
        "--fsync-jobs",
        "2",
        "--strace-jobs",
        strace_jobs,
        "--json",
    )
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["drain"]["done"] == 20 and report["drain"]["dead"] == 0, done.stdout
    assert report["drain"]["rate"] > 0
    assert report["submit_python"]["jobs"] == 20 and report["submit_cli"]["jobs"] == 1
    assert report["pickup"]["count"] == 3 and 0 < report["pickup"]["handler_p50_ms"] < 60_000
    assert report["fsync_seam"]["lifecycle"] > 0
    if strace_jobs != "0":
        assert report["fsync_strace"]["submit"].get("fsync", 0) > 0, report["fsync_strace"]
        assert report["fsync_strace"]["run_per_job"] > 0
    for label in (
        "submit, Python API",
        "drain, first claim -> last done",
        "idle pickup, ack -> handler start",
        "fsyncs per job (seam)",
    ):
        assert label in done.stdout
    assert list(tmp_path.iterdir()) == []


_BENCH_TINY = (
    "--jobs",
    "20",
    "--submit-jobs",
    "10",
    "--many-jobs",
    "20",
    "--cli-submits",
    "1",
    "--pickups",
    "3",
    "--claims",
    "3",
    "--depth",
    "60",
    "--recoveries",
    "1",
    "--no-peers",
    "--json",
)
_BENCH_ROWS = (
    "submit, Python API one by one",
    "submit_many of 20",
    "`spool submit` process",
    "`python -c pass`",
    "end-to-end drain of 20, 2 workers",
    "producer's submit rate meanwhile",
    "idle pickup p50 ms",
    "idle pickup p99 ms",
    "CPU ms per job, by process",
    "claim p50 / p99 ms at 30 pending",
    "claim p50 / p99 ms at 60 pending",
    "reconcile() ms at",
    "drain with 60 finished kept",
    "ratio to the drain on an empty spool",
    "fsck of the kept spool",
    "coordinator RSS MB at 60",
    "worker RSS MB at 60",
    "fsyncs per job at the fsio seam",
    "SIGKILLed worker's job: next attempt after, s (1)",
)


def _bench_report(done: subprocess.CompletedProcess[str]) -> dict:
    for label in _BENCH_ROWS:
        assert label in done.stdout, f"{label!r} missing:\n{done.stdout}"
    assert "disk: --dir" in done.stdout and "journal:" in done.stdout
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["drain"]["rate"] > 0 and report["kept"]["rate"] > 0
    assert report["drain"]["pickup"]["count"] == 3
    assert len(report["drain"]["recovery"]["seconds"]) == 1 and 0 < report["drain"]["recovery"]["seconds"][0] < 60
    assert report["kept_build"]["fsck_violations"] == 0 and report["kept_build"]["fsck_jobs"] == 60
    assert report["kept"]["rss_mb"]["coordinator"]["VmHWM"] > 0
    return report


@pytest.mark.slow  # ~20 s: every row of the side-by-side benchmark, run small
def test_bench_prints_every_row_without_huey(tmp_path: Path) -> None:
    strace_jobs = "3" if shutil.which("strace") else "0"
    done = _run_benchmark(tmp_path, "bench.py", *_BENCH_TINY, "--no-huey", "--strace-jobs", strace_jobs)
    report = _bench_report(done)
    assert "Huey: skipped (--no-huey)" in done.stdout and "huey_runs" not in report
    assert f"a million Python loop steps take {report['loop_ms']} ms of CPU" in done.stdout
    assert int(report["loop_ms"]) > 0
    if strace_jobs != "0":
        assert "file creations per job (strace" in done.stdout
        assert report["strace"]["fsyncs_per_job"] > 0 and report["strace"]["creations_per_job"] > 0
    assert list(tmp_path.iterdir()) == [], "the work folder is removed"


def test_bench_runs_huey_side_by_side(tmp_path: Path) -> None:
    pytest.importorskip("huey")
    done = _run_benchmark(tmp_path, "bench.py", *_BENCH_TINY, "--strace-jobs", "0")
    report = _bench_report(done)
    assert set(report["huey_runs"]) == {"default poll", "5 ms poll"}
    for run in report["huey_runs"].values():
        assert run["rate"] > 0 and run["pickup"]["count"] == 3
    assert "Huey default poll" in done.stdout and "spool/Huey" in done.stdout
    assert list(tmp_path.iterdir()) == []


def _last_json(stdout: str) -> dict[str, object]:
    return json.loads([line for line in stdout.splitlines() if line.startswith("{")][-1])


def test_jobmap_seam_names_every_fsync_of_a_lifecycle(tmp_path: Path) -> None:
    done = _run_benchmark(tmp_path, "jobmap.py", "seam", "--jobs", "3")
    rows = _last_json(done.stdout)["rows"]
    assert isinstance(rows, list)
    syncs = {(r["phase"], r["folder"]): r["per_job"] for r in rows if r["call"] == "fsync_dir"}
    assert syncs == {
        ("submit", "pending"): 1,
        ("claim", "leased"): 1,
        ("complete", "results"): 1,
        ("complete", "done"): 1,
    }
    assert all(r["asker"].startswith("spool/") for r in rows if r["call"] == "fsync_dir")
    assert list(tmp_path.iterdir()) == [], "the spool is removed without --keep"


def test_jobmap_drain_without_huey(tmp_path: Path) -> None:
    done = _run_benchmark(tmp_path, "jobmap.py", "drain", "--jobs", "20", "--no-huey")
    (round_,) = _last_json(done.stdout)["rounds"]  # type: ignore[misc]
    assert round_["spool"]["rate"] > 0 and "worker" in round_["spool"]["cpu_ms_per_job"]


@pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace")
def test_jobmap_strace_counts_the_fsyncs_of_each_role(tmp_path: Path) -> None:
    done = _run_benchmark(tmp_path, "jobmap.py", "strace", "--jobs", "20", "--calls", "fsync,fdatasync,syncfs")
    by_role = _last_json(done.stdout)["per_job_by_role"]
    assert isinstance(by_role, dict)
    assert by_role["producer"]["fsync"] >= 1.9  # one by one: the job file, then pending/
    # A worker's group commit shares its syncs across jobs (2 to claim and 4 to complete each, alone).
    worker = by_role["worker"]
    assert 0 < worker.get("fsync", 0) + worker.get("syncfs", 0) <= 6.1, worker


def test_bench_runs_the_peers_side_by_side(tmp_path: Path) -> None:
    """Issue 19's shapes, tiny: every system that can run here, and one line for each that cannot."""
    strace_jobs = "4" if shutil.which("strace") else "0"
    args = ("--peers-only", "--jobs", "12", "--backlog", "16", "--peer-strace-jobs", strace_jobs, "--json")
    done = _run_benchmark(tmp_path, "bench.py", *args)
    peers = json.loads(done.stdout.strip().splitlines()[-1])["peers"]
    expected = {"spool"} | ({"huey"} if _importable("huey") else set())
    for name in ("pgqueuer", "procrastinate"):
        if name in peers["skipped"]:
            assert peers["skipped"][name] in done.stdout  # one clear line, and the rest ran
        else:
            expected.add(name)
    assert set(peers["systems"]) == expected, done.stdout
    for name, shapes in peers["systems"].items():
        for shape in ("a", "b", "c"):
            assert shapes[shape]["drain"] > 0 and shapes[shape]["submits"] > 0, (name, shape)
            assert shapes[shape]["cpu_ms"]["system"] >= 0, (name, shape)  # clock ticks: 0 for a dozen Huey jobs
        if strace_jobs != "0":
            assert (
                sum(
                    shapes["strace"]["producer"].get(c, 0) + shapes["strace"]["system"].get(c, 0)
                    for c in ("fsync", "fdatasync", "sync_file_range")
                )
                > 0
            ), name
    for title in ("(a) one producer", "(b) backlog", "(c) producers at once", "spool/peer drain"):
        assert title in done.stdout
    assert list(tmp_path.iterdir()) == [], "the work folder (and any PostgreSQL cluster in it) is removed"


def _importable(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


def test_queues_bench_drains_a_limited_queue_and_counts_what_a_limit_adds_to_the_claim(tmp_path: Path) -> None:
    """Issue 20's rows, tiny (~6 s): one drain of a queue with a limit, and the claim three ways."""
    args = ("--jobs", "4", "--repeats", "1", "--shapes", "c", "--sizes", "30", "--claims", "3")
    done = _run_benchmark(
        tmp_path, "queues.py", *args, "--reserves", "3", "--blocks", "1", "--strace-jobs", "0", "--json"
    )
    report = _last_json(done.stdout)
    drained = report["drains"]["summary"]["c"]  # type: ignore[index]
    assert drained["median"] > 0 and 1 <= drained["most_leased"] <= 2 * 16, drained  # 2 workers, batches of <= 16
    (claims,) = report["claims"]  # type: ignore[misc]
    unlimited, concurrency, rate = (
        claims["variants"][name] for name in ("unlimited", "concurrency 1000", "conc 1000 + rate 1e6/s")
    )
    assert unlimited["claims"] == concurrency["claims"] == rate["claims"] == 3
    # No fsync of its own: a limit is decided in the reservation's ledger transaction.
    assert unlimited["fsyncs_per_claim"] == concurrency["fsyncs_per_claim"] == rate["fsyncs_per_claim"] == 2
    # What it does cost: the queue's leased count (concurrency), its window's count and a claims row (rate).
    assert concurrency["reserve_statements"] == unlimited["reserve_statements"] + 1, claims
    assert rate["reserve_statements"] == unlimited["reserve_statements"] + 3, claims
    for label in ("c: queue bench, concurrency 1000", "claim at 30 pending", "stmts/reserve"):
        assert label in done.stdout
    assert list(tmp_path.iterdir()) == [], "the work folder is removed"


@pytest.mark.slow
def test_remote_prints_every_side_with_one_and_two_servers(tmp_path: Path) -> None:
    args = ["--jobs", "30", "--pickups", "3", "--remote-workers", "1", "--rounds", "2", "--sim-workers", "2"]
    done = _run_benchmark(tmp_path, "remote.py", *args, "--dispatch-jobs", "4", "--json")
    numbers = json.loads(done.stdout.strip().splitlines()[-1])
    for side in ("remote", "remote_2_serves", "sim", "sim_2_serves", "local"):
        assert numbers[side]["drain_jobs_per_s"] > 0, side
        assert numbers[side]["cpu_ms_per_job_serve"] >= 0, side
    assert [len(numbers["rounds"][side]) for side in ("remote", "sim_2_serves")] == [2, 2]
    assert numbers["dispatch"]["drain_jobs_per_s"] > 0
    assert "control plane, 2 simulated remote workers, 2 serves" in done.stdout


def test_spike_log_drains_every_job_with_one_sync_per_acknowledged_submit(tmp_path: Path) -> None:
    """The issue-19 design spike (docs/notes/issue19-spike.md): per-producer logs, a batching
    ingester, two workers. Its premise is one fdatasync per acknowledged submit."""
    done = _run_benchmark(tmp_path, "spike_log.py", "--jobs", "30", "--rounds", "1", "--no-huey", "--json")
    rounds = json.loads(done.stdout.strip().splitlines()[-1])
    assert [r["shape"] for r in rounds] == ["a", "c"], done.stdout
    for spike in (r["spike"] for r in rounds):
        assert spike["jobs"] == 30 and spike["drain"] > 0 and spike["submits"] > 0
        assert spike["calls_per_job"]["producers"]["fdatasync"] == 1.0
        assert spike["calls_per_job"]["producers"]["creations"] == 0.0


def test_spike_log_submit_file_is_specs_recipe_two_syncs_and_a_file_per_submit(tmp_path: Path) -> None:
    """``--submit file``, the floor of SPEC.md's own recipe (issue 19's walls of shapes (a) and
    (c)): each acknowledged submit is a file made durable in pending/ (its fsync and pending/'s),
    no log and no ingester; every job still ends with one result."""
    spool_batches = ["--batch-most", "64", "--hold-ms", "50"]  # runner.batching's today
    args = ["--jobs", "30", "--rounds", "1", "--no-huey", "--submit", "file", *spool_batches, "--json"]
    done = _run_benchmark(tmp_path, "spike_log.py", *args)
    rounds = json.loads(done.stdout.strip().splitlines()[-1])
    assert [r["shape"] for r in rounds] == ["a", "c"], done.stdout
    for spike in (r["spike"] for r in rounds):
        assert spike["jobs"] == 30 and spike["drain"] > 0
        producers = spike["calls_per_job"]["producers"]
        assert (producers["fsync"], producers["fdatasync"], producers["creations"]) == (2.0, 0.0, 1.0)
        none = {"fsync": 0, "fdatasync": 0, "syncfs": 0, "creations": 0, "shared": 0}
        assert spike["calls_per_job"]["ingester"] == none


def test_spike_log_submit_shared_makes_or_skips_one_pending_fsync_per_submit(tmp_path: Path) -> None:
    """``--submit shared``: pending/'s fsync shared among the 4 producers of shape (c); each
    submit still syncs its own file, and either makes pending/'s fsync or finds one begun after
    its rename finished (counted as skipped), never neither."""
    args = ["--shapes", "c", "--jobs", "60", "--rounds", "1", "--no-huey", "--submit", "shared", "--json"]
    done = _run_benchmark(tmp_path, "spike_log.py", *args)
    rounds = json.loads(done.stdout.strip().splitlines()[-1])
    assert [(r["shape"], r["spike"]["jobs"], r["spike"]["producers"]) for r in rounds] == [("c", 60, 4)]
    producers = rounds[0]["spike"]["calls_per_job"]["producers"]
    assert producers["creations"] == 1.0
    assert producers["fsync"] + producers["shared"] == pytest.approx(2.0), producers


def test_spike_log_shape_b_loads_the_backlog_before_a_worker_starts(tmp_path: Path) -> None:
    """Shape (b), the floor of a backlog's drain: every job is in pending/ before the workers start,
    so their claims take many jobs each, and every job still ends with one result."""
    args = ["--shapes", "b", "--backlog", "40", "--rounds", "1", "--no-huey", "--submit", "file", "--json"]
    done = _run_benchmark(tmp_path, "spike_log.py", *args)
    rounds = json.loads(done.stdout.strip().splitlines()[-1])
    assert [(r["shape"], r["spike"]["jobs"], r["spike"]["producers"]) for r in rounds] == [("b", 40, 1)]
    spike = rounds[0]["spike"]
    assert spike["drain"] > 0 and spike["submits"] > 0
    assert spike["claim_batch"] > 1, done.stdout
    assert spike["calls_per_job"]["producers"]["fsync"] == 2.0


def test_bench_warns_before_a_run_that_may_use_up_the_disks_inodes(tmp_path: Path) -> None:
    import argparse

    from benchmarks.bench import _warn_if_few_inodes

    said: list[str] = []
    free = 10_000
    many = argparse.Namespace(many_jobs=free, jobs=1, peers_only=True)  # ~3 files a job: more than there is
    _warn_if_few_inodes(free, many, 0, said.append)
    assert len(said) == 1 and "free inodes on this disk (df -i)" in said[0], said
    _warn_if_few_inodes(free, argparse.Namespace(many_jobs=1, jobs=1, peers_only=True), 0, said.append)
    assert len(said) == 1, "a small run is not warned about"


@pytest.mark.slow  # ~20 s: four processes under callgrind
def test_instructions_counts_a_workers_and_a_submits_and_cleans_up(tmp_path: Path) -> None:
    """The deterministic CPU measure (``benchmarks/instructions.py``): a worker's instructions per
    job and a submit's are positive and plausible (a job costs more than a submit: the worker
    reads, rewrites and moves it twice), and every spool it made is gone."""
    if shutil.which("valgrind") is None:
        pytest.skip("valgrind is not installed (.ci/run installs it)")
    done = _run_benchmark(tmp_path, "instructions.py", "--jobs", "40", "--submits", "30", "--json")
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["worker"]["jobs"] == 40 and report["submit"]["submits"] == 30
    assert 100_000 < report["submit"]["per_submit"] < report["worker"]["per_job"] < 50_000_000, report
    assert list(tmp_path.iterdir()) == [], "the spools are removed"


def test_sync_after_idle_prints_a_row_per_gap(tmp_path: Path) -> None:
    done = _run_benchmark(tmp_path, "sync_after_idle.py", "--syncs", "5", "--gaps", "0,5")
    rows = re.findall(r"^\s+([\d.]+)\s+([\d.]+) / ([\d.]+)\s+([\d.]+) / ([\d.]+)$", done.stdout, re.MULTILINE)
    assert [gap for gap, *_ in rows] == ["0", "5"], done.stdout
    assert all(0 < float(p50) <= float(p99) for _gap, p50, p99, *_ in rows)
    assert list(tmp_path.iterdir()) == [], "its folder is removed"
