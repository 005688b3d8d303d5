"""spool.base.lazylog: a data module's logger that leaves :mod:`logging` unloaded until it matters, and
then behaves as ``logging.getLogger(name)`` would, down to the line a record names."""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest

from spool.base.lazylog import lazy_logger


def test_with_logging_loaded_every_record_passes_on_naming_its_caller(caplog: pytest.LogCaptureFixture) -> None:
    log = lazy_logger("spool.test")
    with caplog.at_level(logging.DEBUG, logger="spool.test"):
        log.debug("d %s", 1)
        log.info("i %s", 2)
        log.warning("w %s", 3)
        log.error("e %s", 4)
    assert [(r.name, r.levelname, r.getMessage()) for r in caplog.records] == [
        ("spool.test", "DEBUG", "d 1"),
        ("spool.test", "INFO", "i 2"),
        ("spool.test", "WARNING", "w 3"),
        ("spool.test", "ERROR", "e 4"),
    ]
    assert {r.pathname for r in caplog.records} == {__file__}
    assert {r.funcName for r in caplog.records} == {"test_with_logging_loaded_every_record_passes_on_naming_its_caller"}


PROBE = """
import sys
from spool.base.lazylog import lazy_logger
log = lazy_logger("spool.probe")
log.info("nobody can have asked for this")
log.debug("nor this")
assert "logging" not in sys.modules
log.warning("a warning %s", "still shows")
assert "logging" in sys.modules
"""


def test_without_logging_info_is_dropped_and_a_warning_still_reaches_stderr() -> None:
    ran = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stderr
    assert ran.stderr == "a warning still shows\n"
