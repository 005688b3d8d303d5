"""The producer of ``benchmarks/queues.py``'s drains, against whichever ``spool`` is importable.

    python benchmarks/queue_producer.py init ROOT
    python benchmarks/queue_producer.py drain '{"root": ..., "jobs": N, "queue": null, "timeout": 600}'

It imports nothing of this checkout but ``spool`` itself, found on PYTHONPATH (or in the venv of
the interpreter that runs it), so the same producer drives this checkout and an older one (the
commit before queues): ``queues.py --base CHECKOUT`` runs it with that checkout's interpreter and
that checkout's folder first on PYTHONPATH. Only what both have is used: ``Spool.init``,
``Spool.submit`` (``queue=`` only when a queue is asked for), ``Spool.result`` and the ledger's
``history`` table, read the way ``bench.py``'s drain reads it.

``drain`` is bench.py's end-to-end drain: the consumer already runs; one ``bench_clock`` job
warms it up (its result awaited), then N ``echo`` jobs are submitted one by one; it prints one
JSON line: the first submit's wall time, the N-th ``complete``'s (from the ledger's history),
the producer's own CPU and submit latencies, and the most jobs of the run leased at once
(from the history's ``claim`` and ``complete`` rows of these N jobs).
"""

from __future__ import annotations

import json
import resource
import sys
import time
from typing import Any

from spool import Spool


def _cpu_self() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _open(root: str, jobs: int) -> Spool:
    # max_pending (10,000 by default) would refuse a larger load: this measures the rate, not backpressure.
    return Spool(root, environ={"SPOOL_MAX_PENDING": str(max(10_000, jobs + 1_000))})


def _submit(sp: Spool, task: str, args: dict[str, Any] | None, queue: str | None) -> str:
    return sp.submit(task, args) if queue is None else sp.submit(task, args, queue=queue)


def _warm_up(sp: Spool, queue: str | None, timeout: float) -> None:
    job_id = _submit(sp, "bench_clock", None, queue)
    deadline = time.monotonic() + timeout
    while True:
        try:
            sp.result(job_id)
            return
        except Exception:  # noqa: BLE001 - not done yet (NotFound, or still running)
            if time.monotonic() > deadline:
                raise SystemExit(f"the warm-up job {job_id} did not finish within {timeout:.0f}s") from None
            time.sleep(0.005)


def most_at_once(rows: list[tuple[str, float, str]]) -> int:
    """The most jobs leased at once: a sweep over (job, at, 'claim'|'complete') rows (a complete at
    the same instant as another job's claim counts as before it)."""
    events = sorted((at, 0 if event == "complete" else 1) for _job, at, event in rows)
    now = most = 0
    for _at, kind in events:
        now += 1 if kind else -1
        most = max(most, now)
    return most


def drain(p: dict[str, Any]) -> dict[str, Any]:
    timeout = float(p.get("timeout", 600))
    queue = p.get("queue")
    with _open(p["root"], p["jobs"]) as sp:
        _warm_up(sp, queue, timeout)
        time.sleep(0.3)
        after_seq = int(sp.ledger._read("SELECT coalesce(max(seq), 0) FROM history", ())[0][0])
        cpu0, latencies = _cpu_self(), []
        first = time.time()
        for n in range(p["jobs"]):
            t0 = time.perf_counter()
            _submit(sp, "echo", {"i": n}, queue)
            latencies.append(time.perf_counter() - t0)
        submitted, cpu = time.time(), _cpu_self() - cpu0
        deadline = time.monotonic() + timeout
        while True:
            done, last = sp.ledger._read(
                "SELECT count(*), max(at) FROM history WHERE seq > ? AND event = 'complete'", (after_seq,)
            )[0]
            if done >= p["jobs"]:
                break
            if time.monotonic() > deadline:
                raise SystemExit(f"{done} of {p['jobs']} jobs done after {timeout:.0f}s")
            time.sleep(0.02)
        rows = sp.ledger._read(
            "SELECT job_id, at, event FROM history WHERE seq > ? AND event IN ('claim', 'complete')", (after_seq,)
        )
    latencies.sort()
    return {
        "first": first,
        "submitted": submitted,
        "last": float(last),
        "producer_cpu": cpu,
        "submit_rate": p["jobs"] / (submitted - first),
        "submit_p50_ms": latencies[len(latencies) // 2] * 1000,
        "most_leased": most_at_once([(job, float(at), event) for job, at, event in rows]),
    }


def main(argv: list[str]) -> int:
    if argv[:1] == ["init"]:
        Spool.init(argv[1], environ={}).close()
        return 0
    if argv[:1] == ["drain"]:
        print(json.dumps(drain(json.loads(argv[1]))), flush=True)
        return 0
    raise SystemExit(f"usage: {sys.argv[0]} init ROOT | drain JSON")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
