"""A planted name whose number is not ASCII digits must not stop the coordinator.

``str.isdigit`` is true for '²' and other Unicode digits that ``int()`` refuses, so a name such as
``leased/.<id>.².hb`` or ``tmp/²-x`` once raised ValueError inside the coordinator's pass: it died,
and a restarted one died again on the same file. Such a name is simply not ours: it is left alone
and every job still runs.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from crashkit import Kit
from support import wait_until

from spool.disk.layout import parse_heartbeat_name, tmp_writer_pid


@pytest.mark.parametrize("name", [".X.².hb", ".X.١.hb", ".X.1².hb"])
def test_a_heartbeat_name_with_a_unicode_digit_is_not_a_heartbeat(name: str) -> None:
    assert parse_heartbeat_name(name) is None


@pytest.mark.parametrize("name", ["²-x.tmp", "١٢-purge-X.tmp"])
def test_a_tmp_name_with_a_unicode_digit_names_no_writer(name: str) -> None:
    assert tmp_writer_pid(name) is None


def test_the_coordinator_outlives_planted_names_with_unicode_digits(kit: Kit, spool_dir: Path) -> None:
    first = kit.submit_many(1, "echo", {"n": 1})[0]
    (spool_dir / "leased" / f".{first}.².hb").write_text("1 nobody\n")
    (spool_dir / "tmp" / "²-planted.tmp").write_text("x")
    coordinator = kit.coordinator()
    kit.worker("w1")
    kit.wait_state(first, "done")
    second = kit.submit_many(1, "echo", {"n": 2})[0]
    kit.wait_state(second, "done")
    # The second job ran after the coordinator's passes over both planted names (it scans leased/
    # and sweeps tmp/ on its first pass); it must still be there, with nothing to report.
    assert coordinator.poll() is None, kit.log(coordinator)
    assert "Traceback" not in kit.log(coordinator)
    wait_until(lambda: not (spool_dir / "tmp" / "²-planted.tmp").exists())  # no live writer: swept as garbage
