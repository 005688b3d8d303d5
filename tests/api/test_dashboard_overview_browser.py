"""The overview's throughput chart in headless Chromium against a real ``spool serve`` and a real
``spool worker``: its top is the busiest second the rates line names (the chart draws each slice's
busiest second, never an average below it), at every zoom."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from spool import Spool
from support import ROOT, Procs, wait_until
from test_dashboard_browser import By, text_of
from test_dashboard_live_browser import log_in

pytest.importorskip("selenium")
HERE = Path(__file__).resolve().parent


def test_the_charts_top_is_the_busiest_second_at_every_zoom(served: Any, browser: Any, served_procs: Procs) -> None:
    env = {"PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), str(ROOT)])}
    served_procs.start("worker", "--import", "examples.tasks", env=env, name="worker")
    with Spool(served.root) as sp:
        ids = [sp.submit("echo", {"n": n}) for n in range(40)]
    wait_until(lambda: _all_done(served, ids), timeout=60, message="40 jobs done")
    log_in(served, browser, "/")

    def peak() -> int:
        text = text_of(browser, "rate-peak")
        return int(text) if text.isdigit() else 0

    wait_until(lambda: peak() >= 2, timeout=15, message="the busiest second on the overview")
    for window in ("3600", "900", "300"):
        browser.find_element(By.CSS_SELECTOR, f"#zoom [data-window='{window}']").click()
        # The chart redraws after the click (the zoom's buckets come with the next refresh).
        wait_until(
            lambda: text_of(browser, "chart-max") == f"{peak()}/s",
            timeout=15,
            message=f"the chart's top at the {window} s zoom is the busiest second",
        )


def _all_done(served: Any, ids: list[str]) -> bool:
    with Spool(served.root) as sp:
        return all((state := sp.state(job_id)) is not None and state.value == "done" for job_id in ids)
