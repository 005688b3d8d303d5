"""An attempt's log is written through the ``spool.disk.fsio`` seam, so the fault layer can fail it.

A log is diagnostics: a write that fails stops that attempt's log, never the attempt.
"""

from __future__ import annotations

import errno
from pathlib import Path

from spool import Spool
from spool.attemptlog import AttemptLog
from spool.runner.attempt.child import AttemptRequest, Child
from tests.faults.faultfs import FaultFS

HERE = Path(__file__).resolve().parent


def _log(sp: Spool, name: str = "job.1.log", max_bytes: int = 1 << 20) -> AttemptLog:
    return AttemptLog(sp.layout.fd("logs"), sp.layout.fd("tmp"), name, max_bytes)


def test_an_attempt_logs_output_is_a_write_the_fault_layer_sees(sp: Spool) -> None:
    recorder = FaultFS()
    log = _log(sp)
    with recorder.installed():
        log.write(b"some output\n")
    log.close()
    assert [(op.kind, op.method) for op in recorder.ops] == [("write", "append")]
    assert (sp.root / "logs" / "job.1.log").read_bytes() == b"some output\n"


def test_a_failed_log_write_stops_the_log_and_raises_nothing(sp: Spool) -> None:
    log = _log(sp)
    with FaultFS(fail_at=1, error=errno.ENOSPC, kinds={"write"}).installed():
        log.write(b"0123456789")  # half lands, as on a filling disk, then the error
        log.write(b"never written")
    log.close()
    assert log.error is not None and log.error.errno == errno.ENOSPC
    assert (sp.root / "logs" / "job.1.log").read_bytes() == b"01234"


def test_an_attempt_whose_log_fails_still_ends_with_its_outcome(sp: Spool) -> None:
    child = Child(import_modules=["child_tasks"], allow_shell=False, max_result_bytes=1 << 20, sys_path=[str(HERE)])
    log = _log(sp)
    try:
        with FaultFS(fail_at=1, error=errno.EIO, kinds={"write"}).installed():
            child.begin(
                AttemptRequest(
                    job_id="job",
                    attempt=1,
                    task="t.print",
                    args={"marker": "m"},
                    timeout_seconds=30.0,
                    tries_left=1,
                    log=log,
                )
            )
            outcome = None
            while outcome is None:
                outcome = child.poll(1.0)
    finally:
        child.kill()
        log.close()
    assert outcome.ok and outcome.value == "printed", outcome
    assert log.error is not None and log.error.errno == errno.EIO


def test_a_full_disk_while_a_log_is_trimmed_stops_the_log_and_raises_nothing(sp: Spool) -> None:
    """The trim stages the kept tail with ``write_new``, which names ENOSPC ``DiskFull`` (not an
    OSError) for the submit path; the log must still only stop, never raise into the worker."""
    log = _log(sp, max_bytes=8)
    log.write(b"0123456789")  # over twice the cap on the next write: that one trims
    with FaultFS(fail_at=1, error=errno.ENOSPC, kinds={"write"}).installed():
        log.write(b"abcdefghij")
        log.write(b"never written")
    log.close()
    assert log.error is not None and log.error.errno == errno.ENOSPC
    assert (sp.root / "logs" / "job.1.log").read_bytes() == b"0123456789"
