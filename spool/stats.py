"""``spool stats``: counts per state, throughput, oldest ready age, coordinator and workers seen."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from spool.job import format_time, parse_time
from spool.locks import is_held, worker_lock_name
from spool.workers import unhandled_ready

if TYPE_CHECKING:
    from spool.spool import Spool


def coordinator_state(sp: Spool) -> str:
    """'running (pid N)' or 'no coordinator since T' (SPEC: Processes)."""
    alive = is_held(sp.layout.fd("locks"), "coordinator.lock")
    seen = sp.ledger.meta("coordinator_seen")
    if alive:
        return f"running (pid {sp.ledger.meta('coordinator_pid')})"
    return f"no coordinator since {seen}" if seen else "no coordinator has run yet"


def collect(sp: Spool) -> dict[str, Any]:
    now = time.time()
    oldest = sp.ledger.oldest_ready_submitted()
    workers = [
        {"name": name, "pid": pid, "host": host, "started": format_time(started), "seen": format_time(seen),
         "alive": bool(is_held(sp.layout.fd("locks"), worker_lock_name(name)))}
        for name, pid, host, started, seen in sp.ledger.workers()
    ]
    return {
        "counts": sp.ledger.counts(),
        "ready": sp.ledger.ready_pending_count(),
        "oldest_ready_seconds": round(now - parse_time(oldest, "submitted_at").timestamp(), 3) if oldest else None,
        "completed_last_minute": sp.ledger.completed_since(now - 60),
        "coordinator": coordinator_state(sp),
        "workers": [w for w in workers if w["alive"]] + [w for w in workers if not w["alive"]][:10],
        "unhandled_tasks": unhandled_ready(sp),  # task -> ready jobs that no live worker handles
    }
