"""The dashboard's sampler (``spool.runner.api.dashboard.live``) against a real ``spool run``: its per-second
buckets count every completed and failed attempt the ledger holds, read incrementally or from the
whole hour alike, and every stream gets the whole hour first, then only what changed."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from spool import Spool
from spool.runner.api.dashboard.live import Live
from support import Procs, wait_until


def totals(live: Live) -> tuple[int, int]:
    whole = live.whole().values()
    return sum(c for c, _ in whole), sum(f for _, f in whole)


def ledger_has(sp: Spool, counts: dict[str, int]) -> bool:
    """The ledger's rows (and their history) are written just after a job's result: wait for them."""
    return sp.ledger.counts() == counts


def test_the_sampler_counts_what_the_ledger_holds_and_streams_the_hour_then_changes(sp: Spool, procs: Procs) -> None:
    procs.start("run", "--workers", "2", "--import", "examples.tasks", name="run")
    for i in range(5):
        sp.submit("echo", {"n": i})
    for _ in range(3):
        sp.submit("fail_until", {"attempt": 99}, max_tries=1)
    wait_until(lambda: ledger_has(sp, {"done": 5, "dead": 3}), timeout=60, message="the first jobs to end")
    steady = Live(sp)
    first = steady.sample()
    assert totals(steady) == (5, 3) and first.counts == {"done": 5, "dead": 3}

    for i in range(4):
        sp.submit("echo", {"n": i})
    wait_until(lambda: ledger_has(sp, {"done": 9, "dead": 3}), timeout=60, message="the second jobs to end")
    second = steady.sample()  # reads only the history rows after the first sample's
    assert totals(steady) == (9, 3) and second.counts == {"done": 9, "dead": 3}
    assert second.version == first.version + 1
    assert sum(c for c, _ in second.changed.values()) >= 4  # the seconds the new completions fell in
    fresh = Live(sp)
    fresh.sample()  # reads the whole hour at once
    assert fresh.whole() == steady.whole()


def test_every_stream_gets_the_whole_hour_then_only_changes(sp: Spool, procs: Procs) -> None:
    procs.start("run", "--workers", "1", "--import", "examples.tasks", name="run")
    for i in range(3):
        sp.submit("echo", {"n": i})
    wait_until(lambda: ledger_has(sp, {"done": 3}), timeout=60, message="the jobs to end")

    async def two_streams() -> list[list[dict[str, Any]]]:
        live = Live(sp)
        await live.start()
        try:

            async def never_gone() -> bool:
                return False

            async def read(n: int) -> list[dict[str, Any]]:
                got = []
                async for event in live.events(never_gone):
                    if "data: " in event:
                        got.append(json.loads(event.split("data: ", 1)[1]))
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


def test_a_browser_that_reconnects_gets_only_what_it_missed(sp: Spool, procs: Procs) -> None:
    procs.start("run", "--workers", "1", "--import", "examples.tasks", name="run")

    async def never_gone() -> bool:
        return False

    async def messages(live: Live, n: int, last_event_id: str | None = None) -> list[tuple[str, dict[str, Any]]]:
        got = []
        async for event in live.events(never_gone, last_event_id):
            if event.startswith("id: "):
                head, data = event.split("\n", 1)
                got.append((head[4:], json.loads(data[6:])))
                if len(got) == n:
                    break
        return got

    async def scenario() -> None:
        live = Live(sp)
        await live.start()
        try:
            (first_id, first), *_ = await messages(live, 1)
            assert first["full"] is True
            for i in range(3):
                sp.submit("echo", {"n": i})
            while not ledger_has(sp, {"done": 3}):
                await asyncio.sleep(0.05)
            await live.wait_for(live.sample_now.version + 1, timeout=5)  # a sample after the last end
            (_, resumed), *_ = await messages(live, 1, first_id)
            assert resumed["full"] is False and sum(c for _, c, _ in resumed["points"]) == 3
            assert resumed["counts"] == {"done": 3}
            for stranger in ("", "0000.1", "x.y", first_id.split(".")[0] + ".999999"):
                (_, restarted), *_ = await messages(live, 1, stranger)
                assert restarted["full"] is True and sum(c for _, c, _ in restarted["points"]) == 3
        finally:
            await live.stop()

    asyncio.run(asyncio.wait_for(scenario(), timeout=60))


def test_many_open_dashboards_cost_the_ledger_what_one_does(sp: Spool) -> None:
    sp.submit("echo", {"n": 1})
    reads = 0
    real_read = sp.ledger._read

    def counted(sql: str, params: Any = ()) -> Any:
        nonlocal reads
        reads += 1
        return real_read(sql, params)

    sp.ledger._read = counted  # type: ignore[method-assign]  # counts the reads, changes none

    async def streams(viewers: int) -> tuple[int, int]:
        live = Live(sp)
        await live.start()
        try:

            async def never_gone() -> bool:
                return False

            async def read(n: int) -> int:
                got = 0
                async for event in live.events(never_gone):
                    got += "data: " in event
                    if got == n:
                        break
                return got

            before = reads
            got = await asyncio.wait_for(asyncio.gather(*(read(3) for _ in range(viewers))), timeout=20)
            return sum(got), reads - before
        finally:
            await live.stop()

    one_message, one_reads = asyncio.run(streams(1))
    many_messages, many_reads = asyncio.run(streams(50))
    assert one_message == 3 and many_messages == 150
    assert many_reads <= one_reads + 4, (one_reads, many_reads)  # a sample's reads, not one per viewer


def test_a_following_stream_gets_the_changed_rows_its_filter_matches_and_drops_the_rest(sp: Spool) -> None:
    """No worker: the moves are the test's own (submit, cancel), the sampler's reads real."""
    from spool.base.errors import InvalidJob
    from spool.runner.api.dashboard.follow import ROWS_PER_SAMPLE, Follow, follow_of

    live = Live(sp)
    kept = sp.submit("echo", {"n": 0})
    drawn_after = live.sample().version  # what a page drawn now follows on from
    other = sp.submit("other", {"n": 1})
    mine = sp.submit("echo", {"n": 2}, key="mine")
    sp.cancel(kept)
    live.sample()
    pending_echo = follow_of({"list": "1", "state": "pending", "task": "echo", "since": str(drawn_after)})
    assert pending_echo == Follow(filter=pending_echo.filter, since=drawn_after)

    async def first_message(follow: Follow) -> dict[str, Any]:
        async def never_gone() -> bool:
            return False

        async for event in live.events(never_gone, None, follow):
            if event.startswith("id: "):
                return dict(json.loads(event.split("\n", 1)[1][6:]))
        raise AssertionError("no message")

    got = asyncio.run(first_message(pending_echo))
    assert [row["id"] for row in got["jobs"]] == [mine] and got["jobs"][0]["key"] == "mine"
    assert set(got["gone"]) == {kept, other} and got["cut"] is False  # changed, and not (or no longer) pending echo
    one_job = asyncio.run(first_message(Follow(job=kept, since=drawn_after)))
    assert [(row["id"], row["state"]) for row in one_job["jobs"]] == [(kept, "dead")] and one_job["gone"] == []
    assert asyncio.run(first_message(Follow(filter=pending_echo.filter)))["jobs"] == []  # no since: the page is new

    sp.submit_many([sp.spec("echo", {"n": n}) for n in range(ROWS_PER_SAMPLE + 1)])
    crowded = live.sample()
    assert crowded.jobs_cut and len(crowded.jobs) == ROWS_PER_SAMPLE  # the newest changes; the page says so
    before_crowd = Follow(filter=pending_echo.filter, since=drawn_after)  # the crowded sample's cut reaches it
    assert asyncio.run(first_message(before_crowd))["cut"] is True
    for bad in ("../x", "a/b"):
        try:
            follow_of({"job": bad})
        except InvalidJob:
            continue
        raise AssertionError(f"{bad!r} was taken for a job id")


def test_durations_read_as_people_say_them() -> None:
    from spool.runner.api.dashboard.story import duration_text, run_text

    said = [duration_text(s) for s in (0.35, 4.24, 185, 7440)]
    assert said == ["350 ms", "4.2 s", "3 min 5 s", "2 h 4 min"]
    assert run_text({"started": 100.0, "ended": 104.2}, "done", 500.0) == "4.2 s"
    assert run_text({"started": 100.0, "ended": None}, "leased", 130.0) == "running 30.0 s"
    assert run_text({"started": 100.0, "ended": None}, "pending", 130.0) == ""  # waits for its retry
    assert run_text(None, "pending", 130.0) == ""
