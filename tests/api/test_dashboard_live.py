"""The dashboard's sampler (``spool.runner.api.live``) against a real ``spool run``: its per-second
buckets count every completed and failed attempt the ledger holds, read incrementally or from the
whole hour alike, and every stream gets the whole hour first, then only what changed."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from spool import Spool
from spool.runner.api.live import Live
from support import Procs, wait_until


def totals(live: Live) -> tuple[int, int]:
    whole = live.whole().values()
    return sum(c for c, _ in whole), sum(f for _, f in whole)


def all_terminal(sp: Spool, ids: list[str]) -> bool:
    return all((state := sp.state(job_id)) is not None and state.terminal for job_id in ids)


def test_the_sampler_counts_what_the_ledger_holds_and_streams_the_hour_then_changes(sp: Spool, procs: Procs) -> None:
    procs.start("run", "--workers", "2", "--import", "examples.tasks", name="run")
    ok = [sp.submit("echo", {"n": i}) for i in range(5)]
    bad = [sp.submit("fail_until", {"attempt": 99}, max_tries=1) for _ in range(3)]
    wait_until(lambda: all_terminal(sp, ok + bad), timeout=60, message="the first jobs to end")
    steady = Live(sp)
    first = steady.sample()
    assert totals(steady) == (5, 3) and first.counts == {"done": 5, "dead": 3}

    more = [sp.submit("echo", {"n": i}) for i in range(4)]
    wait_until(lambda: all_terminal(sp, more), timeout=60, message="the second jobs to end")
    second = steady.sample()  # reads only the history rows after the first sample's
    assert totals(steady) == (9, 3) and second.counts == {"done": 9, "dead": 3}
    assert second.version == first.version + 1
    assert sum(c for c, _ in second.changed.values()) >= 4  # the seconds the new completions fell in
    fresh = Live(sp)
    fresh.sample()  # reads the whole hour at once
    assert fresh.whole() == steady.whole()


def test_every_stream_gets_the_whole_hour_then_only_changes(sp: Spool, procs: Procs) -> None:
    procs.start("run", "--workers", "1", "--import", "examples.tasks", name="run")
    ids = [sp.submit("echo", {"n": i}) for i in range(3)]
    wait_until(lambda: all_terminal(sp, ids), timeout=60, message="the jobs to end")

    async def two_streams() -> list[list[dict[str, Any]]]:
        live = Live(sp)
        await live.start()
        try:

            async def never_gone() -> bool:
                return False

            async def read(n: int) -> list[dict[str, Any]]:
                got = []
                async for event in live.events(never_gone):
                    if event.startswith("data: "):
                        got.append(json.loads(event[6:]))
                        if len(got) == n:
                            return got
                return got

            return list(await asyncio.wait_for(asyncio.gather(read(2), read(2)), timeout=20))
        finally:
            await live.stop()

    for first, second in asyncio.run(two_streams()):
        assert first["full"] is True and sum(c for _, c, _ in first["points"]) == 3
        assert first["counts"] == {"done": 3}
        assert second["full"] is False and second["points"] == []  # nothing changed since
