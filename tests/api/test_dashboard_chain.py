"""A job's chain graph over real HTTPS, against a real coordinator and worker: a middle job's page
draws the whole chain (every ancestor and every descendant, not only its neighbours, and not its
ancestors' other children); each node names its task, key, state and a dead job's reason; a failed
job is drawn apart from a skipped one."""

from __future__ import annotations

import re
from typing import Any


from spool import Spool
from support import Procs, wait_until
from test_dashboard import Browser


def nodes(page: Any) -> dict[str, tuple[str, str]]:
    """job id -> (its node's classes, its node's text) of the chain graph on a job's page."""
    svg = re.search(r'<svg class="chain" id="chain".*?</svg>', page.body, re.S)
    assert svg, page.body
    found = re.findall(r'<g class="node ([^"]*)" data-id="([^"]+)">(.*?)</g>', svg.group(0), re.S)
    return {job_id: (classes, re.sub(r"<[^>]+>", " ", inner)) for classes, job_id, inner in found}


def test_a_middle_jobs_page_draws_the_whole_chain_with_task_key_and_reason(served: Any, served_procs: Procs) -> None:
    served_procs.start("coordinator", name="coordinator")
    served_procs.start("worker", "--import", "examples.tasks", name="worker")
    with Spool(served.root) as sp:
        root = sp.submit("echo", {"step": 0})
        fetch = sp.submit("echo", {"step": 1}, depends_on=[root], key="fetch-2026-12-05")
        sibling = sp.submit("echo", {"step": "aside"}, depends_on=[root])
        middle = sp.submit("reject", {"why": "not a JPEG"}, depends_on=[fetch])
        child = sp.submit("echo", {"step": 3}, depends_on=[middle])
        grandchild = sp.submit("echo", {"step": 4}, depends_on=[child])
        other_child = sp.submit("echo", {"step": "3b"}, depends_on=[middle])

    def settled() -> bool:
        with Spool(served.root) as sp:
            states = [sp.state(job_id) for job_id in (grandchild, other_child, sibling)]
        return all(state is not None and state.value in ("dead", "done") for state in states)

    wait_until(settled, timeout=60, message="the chain to end")
    browser = Browser(served)
    browser.login(served.token("viewer", "submit"))
    drawn = nodes(browser.get(f"/jobs/{middle}"))
    assert set(drawn) == {root, fetch, middle, child, grandchild, other_child}, drawn  # not the sibling
    classes, text = drawn[middle]
    assert "here" in classes and "reason-failed" in classes and "state-dead" in classes
    assert "reject" in text and "failed" in text
    classes, text = drawn[child]
    assert "reason-skipped" in classes and "reason-failed" not in classes
    assert "echo" in text and "skipped" in text
    assert "reason-skipped" in drawn[grandchild][0]
    assert "fetch-2026-12-05" in drawn[fetch][1] and "state-done" in drawn[fetch][0] and "done" in drawn[fetch][1]
    assert "reason-" not in drawn[root][0]
    # Columns by generation: each job right of its parents.
    page = browser.get(f"/jobs/{middle}").body
    x = {
        job_id: int(re.search(rf'data-id="{job_id}">\s*<title>.*?</title>\s*<rect x="(\d+)"', page, re.S).group(1))
        for job_id in drawn
    }  # type: ignore[union-attr]
    assert x[root] < x[fetch] < x[middle] < x[child] < x[grandchild] and x[other_child] == x[child]
    leaf = nodes(browser.get(f"/jobs/{grandchild}"))
    assert set(leaf) == {root, fetch, middle, child, grandchild}  # every ancestor, up to the root
    top = nodes(browser.get(f"/jobs/{root}"))
    assert set(top) == {root, fetch, sibling, middle, child, grandchild, other_child}  # every descendant
