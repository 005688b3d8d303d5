"""Chains you can see: a job's parents with their states, its children, the schedule that fired it.

``spool status`` and ``spool ls`` add these to a job's view: ``parents`` (each ``depends_on`` id
with its state and reason, from the files: what a waiting job waits for, what a skipped job was
skipped because of), ``waiting_for`` (the parents not yet done), ``children`` (the jobs that
depend on it, from the ledger's index of ``depends_on``) and ``schedule`` (the schedule whose
firing made it, read from its key).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from spool.base.errors import InvalidJob, LedgerError
from spool.disk.layout import State
from spool.schedule.format import schedule_of_key
from spool.moves.store import read_job, state_of

if TYPE_CHECKING:
    from spool.handle import Handle

__all__ = ["chain_view", "job_link"]


def chain_view(sp: Handle, view: Mapping[str, Any]) -> dict[str, Any]:
    """The chain fields of the job ``view`` describes (a ``status_view``)."""
    parents = [job_link(sp, dep) for dep in view.get("depends_on") or ()]
    try:
        child_ids = sorted(sp.ledger.dependents(view["id"]))
    except LedgerError:
        child_ids = []  # the index is being rebuilt: no children shown rather than a failure
    return {
        "parents": parents,
        "waiting_for": [p["id"] for p in parents if p["state"] != State.DONE.value]
        if view["state"] == State.WAITING.value
        else [],
        "children": [job_link(sp, child) for child in child_ids],
        "schedule": schedule_of_key(view["key"]),
    }


def job_link(sp: Handle, job_id: str) -> dict[str, Any]:
    """``{id, state, reason}`` of a job another one names; state ``purged`` once it is gone."""
    state = state_of(sp, job_id)
    reason = None
    if state is State.DEAD:
        try:
            reason = read_job(sp, State.DEAD, job_id).reason
        except (FileNotFoundError, InvalidJob):
            pass
    return {"id": job_id, "state": state.value if state else "purged", "reason": reason}
