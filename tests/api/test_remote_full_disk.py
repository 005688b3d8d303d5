"""A remote worker whose outcome meets the server's full disk (HTTP 503) keeps the lease alive
while it retries, as a local worker does (``runner.keepalive``): the coordinator expires a lease
only when its heartbeat stops changing, and an attempt that ended while the disk was full is no
lost attempt. Before, the worker retried the complete without a beat: once the disk had room
again the coordinator could expire the lease first, and the handler ran a second time (or the
job went dead on its last try).

On a real size-capped tmpfs (root only; skipped, saying why, elsewhere)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from test_remote import Processes, _spool, _wait_running

from support import fill_disk, wait_until


def test_a_remote_worker_keeps_its_lease_alive_while_the_servers_full_disk_refuses_its_outcome(
    tmpfs: Callable[[str], Path], serve_spool: Callable[..., Any], tmp_path: Path
) -> None:
    disk = tmpfs("16m")
    served = serve_spool(parent=disk)
    logs = tmp_path / "remote-logs"
    logs.mkdir()
    processes = Processes(served, logs)
    try:
        processes.coordinator()  # a term of 1.5 s: without a beat the lease expires after it
        with _spool(served) as sp:
            job_id = sp.submit("sleep", {"seconds": 1.0}, max_tries=3)
        processes.remote("remote-a")
        _wait_running(processes, "remote-a", job_id, 1)
        fill_disk(disk / "filler")
        retrying = f"complete of {job_id}: "
        wait_until(lambda: retrying in processes.log("remote-a"), 30, message="the complete refused: the disk is full")
        beat = served.root / "leased" / f".{job_id}.1.hb"
        seen: set[str] = set()

        def beats_seen() -> int:
            try:
                seen.add(beat.read_text().split()[0])
            except (OSError, IndexError):
                pass
            return len(seen)

        # Four distinct counters while the outcome waits: over two lease terms of beats.
        wait_until(lambda: beats_seen() >= 4, 30, message="keep-alive beats while the complete is refused")
        assert "disk is full" in processes.log("remote-a")
        with _spool(served) as sp:
            status = sp.status(job_id)
        assert (status["state"], status["attempt"]) == ("leased", 1), status
        (disk / "filler").unlink()
        wait_until(lambda: (served.root / "done" / f"{job_id}.yaml").exists(), 60, message="the job done")
        with _spool(served) as sp:
            status = sp.status(job_id)
        assert (status["attempt"], status["tries"]) == (1, 1), status
        assert [record["outcome"] for record in status["attempts"]] == ["done"], status
    finally:
        processes.kill_all()
