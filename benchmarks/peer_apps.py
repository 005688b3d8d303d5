"""What runs in the processes of ``benchmarks/peers.py``: each system's producer, and the PostgreSQL
queues' workers and schema.

    python benchmarks/peer_apps.py produce SYSTEM JSON     # prints one JSON line
    python benchmarks/peer_apps.py worker pgqueuer|procrastinate
    python benchmarks/peer_apps.py install pgqueuer|procrastinate
    python benchmarks/peer_apps.py pragmas huey               # SqliteHuey's journal_mode, synchronous

Every system gets the same trivial job, submitted one at a time through its own Python API, each
call returning once the system says the job is accepted: spool ``Spool.submit("echo", ...)``
(durable on return), Huey ``noop(i)`` (SqliteHuey, its defaults), pgqueuer
``Queries.enqueue("noop", ...)`` (asyncpg, autocommit: the INSERT has committed), procrastinate
``noop.defer(i=...)`` (psycopg, committed). The PostgreSQL DSN is ``BENCH_PG_DSN``; Huey's file
``BENCH_HUEY_DB``; spool's root is in the JSON.

The workers use each library's defaults: pgqueuer ``QueueManager.run()`` (batch_size 10, which
also batches its completion log), procrastinate ``run_worker(concurrency=1)`` (LISTEN/NOTIFY on).
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def _dsn_parts(dsn: str) -> dict[str, str]:
    return dict(part.split("=", 1) for part in dsn.split())


async def _asyncpg_connect() -> Any:
    import asyncpg  # type: ignore[import-untyped]

    parts = _dsn_parts(os.environ["BENCH_PG_DSN"])
    return await asyncpg.connect(
        host=parts["host"], port=int(parts["port"]), user=parts["user"], database=parts["dbname"]
    )


def procrastinate_app() -> Any:
    import procrastinate

    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=os.environ["BENCH_PG_DSN"]))

    @app.task(name="noop")
    def noop(i: int) -> None:
        """The trivial job."""

    return app


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _loop(submit: Callable[[int], object], p: dict[str, Any]) -> dict[str, Any]:
    """Wait for ``start_at`` (so several producers start together), then submit ``jobs`` one by one."""
    while time.time() < p.get("start_at", 0):
        time.sleep(0.001)
    latencies, cpu0, first, refused = [], _cpu(), time.time(), []
    for n in range(p["offset"], p["offset"] + p["jobs"]):
        t0 = time.perf_counter()
        try:
            submit(n)
        except Exception as error:  # noqa: BLE001 - not accepted (Huey: "database is locked"): count it, go on
            refused.append(f"{type(error).__name__}: {error}")
            continue
        latencies.append(time.perf_counter() - t0)
    return {**_report(latencies, first, cpu0), "refused": len(refused), "refusals": sorted(set(refused))[:3]}


def _report(latencies: list[float], first: float, cpu0: float) -> dict[str, Any]:
    submitted = time.time()
    ordered = sorted(latencies)
    return {
        "jobs": len(latencies),
        "first": first,
        "submitted": submitted,
        "cpu_s": _cpu() - cpu0,
        "p50_ms": ordered[len(ordered) // 2] * 1000 if ordered else 0.0,
        "p99_ms": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000 if ordered else 0.0,
    }


async def _pgqueuer_loop(p: dict[str, Any]) -> dict[str, Any]:
    from pgqueuer import AsyncpgDriver, Queries

    conn = await _asyncpg_connect()
    queries = Queries(AsyncpgDriver(conn))
    while time.time() < p.get("start_at", 0):
        await asyncio.sleep(0.001)
    latencies, cpu0, first = [], _cpu(), time.time()
    for n in range(p["offset"], p["offset"] + p["jobs"]):
        t0 = time.perf_counter()
        await queries.enqueue("noop", str(n).encode())
        latencies.append(time.perf_counter() - t0)
    report = _report(latencies, first, cpu0)
    await conn.close()
    return report


def produce(system: str, p: dict[str, Any]) -> dict[str, Any]:
    if system == "spool":
        from spool import Spool

        # max_pending (10,000 by default) would refuse the backlog: this measures rates, not backpressure.
        with Spool(Path(p["root"]), environ={"SPOOL_MAX_PENDING": str(2 * p["jobs"] + 20_000)}) as sp:
            return _loop(lambda n: sp.submit("echo", {"i": n}), p)
    if system == "huey":
        from benchmarks.huey_app import noop

        return _loop(noop, p)
    if system == "pgqueuer":
        return asyncio.run(_pgqueuer_loop(p))
    if system == "procrastinate":
        app = procrastinate_app()
        with app.open():
            task = app.tasks["noop"]
            return _loop(lambda n: task.defer(i=n), p)
    raise SystemExit(f"unknown system {system!r}")


async def _pgqueuer_worker() -> None:
    from pgqueuer import AsyncpgDriver, Queries, QueueManager

    qm = QueueManager(Queries(AsyncpgDriver(await _asyncpg_connect())))

    @qm.entrypoint("noop")
    async def noop(job: object) -> None:
        """The trivial job."""

    await qm.run()


def worker(system: str) -> None:
    if system == "pgqueuer":
        asyncio.run(_pgqueuer_worker())
    elif system == "procrastinate":
        procrastinate_app().run_worker(concurrency=1, install_signal_handlers=True)
    else:
        raise SystemExit(f"no worker here for {system!r}")


async def _pgqueuer_install() -> None:
    from pgqueuer import AsyncpgDriver, Queries

    conn = await _asyncpg_connect()
    await Queries(AsyncpgDriver(conn)).install()
    await conn.close()


def install(system: str) -> None:
    if system == "pgqueuer":
        asyncio.run(_pgqueuer_install())
    elif system == "procrastinate":
        app = procrastinate_app()
        with app.open():
            app.schema_manager.apply_schema()
    else:
        raise SystemExit(f"nothing to install for {system!r}")


def main(argv: list[str]) -> int:
    command, system = argv[0], argv[1]
    if command == "produce":
        print(json.dumps(produce(system, json.loads(argv[2]))), flush=True)
    elif command == "worker":
        worker(system)
    elif command == "pragmas":  # what SqliteHuey's own connection runs with
        from benchmarks.huey_app import huey

        conn = huey.storage.conn
        pragmas = {name: conn.execute(f"PRAGMA {name}").fetchone()[0] for name in ("journal_mode", "synchronous")}
        print(json.dumps(pragmas), flush=True)
    elif command == "install":
        install(system)
    else:
        raise SystemExit(f"unknown command {command!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
