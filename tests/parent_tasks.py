"""The task the parents' results tests run (tests/crash/test_parent_results.py and
tests/api/test_remote_parent_results.py): its result is what ``current().parent_results()`` gave."""

from __future__ import annotations

from spool import current, task


@task("parents")
def parents() -> dict[str, object]:
    """``{"parents": {parent_id: result}}``, and whether a second call gave a fresh copy."""
    first = current().parent_results()
    first["changed by the handler"] = True
    again = current().parent_results()
    return {"parents": again, "fresh_copy": "changed by the handler" not in again}
