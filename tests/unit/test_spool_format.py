"""A spool written by a newer format than this code reads is refused with one line that says so;
today's marker and a marker without a format line open as before."""

from __future__ import annotations

from pathlib import Path

from spool import Spool
from support import run_spool


def test_a_newer_format_is_refused_and_todays_opens(tmp_path: Path) -> None:
    root = tmp_path / "spool"
    Spool.init(root, environ={}).close()
    assert (root / ".spool").read_text() == "spool_format: 1\n"
    assert run_spool("stats", spool=root).returncode == 0
    (root / ".spool").write_text("spool_format: 2\n")
    refused = run_spool("stats", spool=root)
    assert refused.returncode != 0 and "Traceback" not in refused.stderr
    assert refused.stderr.strip().splitlines() == [
        f"spool: {root}: written by a newer spool (spool_format 2; this one reads 1): "
        "upgrade spool to use it (docs/operations.md, 'Upgrades')"
    ]
    (root / ".spool").write_text("")  # a marker made by hand, as some old instructions said
    assert run_spool("stats", spool=root).returncode == 0
