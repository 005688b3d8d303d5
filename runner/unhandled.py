"""The coordinator's warning about tasks whose ready jobs no live worker handles (local workers by
their locks, remote ones by when the server last heard from them: ``spool.workers``).

Task names are the submitters' choice: past ``LINES_AT_ONCE`` tasks due at once (9,000 task names
logged 9,001 lines), one summary line names the ``NAMED_IN_SUMMARY`` with the most ready jobs and
counts the rest; ``spool stats`` lists them all."""

from __future__ import annotations

import logging

from spool.base.errors import SpoolError
from spool.spool import Spool
from spool.workers import unhandled_ready, unhandled_warning

log = logging.getLogger("spool.coordinator")

LINES_AT_ONCE = 5
NAMED_IN_SUMMARY = 10


class UnhandledWarner:
    """One WARNING per task whose ready jobs no live worker handles (``spool.workers``), once it
    has been so for the ``unhandled_grace_seconds`` setting (workers starting beside the
    coordinator have not said what they handle yet); again only after a worker for it has come
    and gone."""

    def __init__(self) -> None:
        self.since: dict[str, float] = {}  # task -> the coordinator's clock when first seen unhandled
        self.warned: set[str] = set()

    def check(self, sp: Spool, now: float) -> None:
        try:
            unhandled = unhandled_ready(sp)
        except (OSError, SpoolError) as err:  # the ledger's errors are typed (LedgerError, DiskFull)
            log.debug("could not list the live workers' tasks: %s", err)
            return
        for task in list(self.since):
            if task not in unhandled:
                del self.since[task]
                self.warned.discard(task)
        due = [
            task
            for task in unhandled
            if task not in self.warned and now - self.since.setdefault(task, now) >= sp.settings.unhandled_grace_seconds
        ]
        self.warned.update(due)
        if len(due) <= LINES_AT_ONCE:
            for task in due:
                log.warning("%d ready job(s) of task %r: %s", unhandled[task], task, unhandled_warning(task))
            return
        busiest = sorted(due, key=lambda task: (-unhandled[task], task))[:NAMED_IN_SUMMARY]
        log.warning(
            "%d ready job(s) of %d tasks wait: no live worker handles them (the most: %s%s; `spool stats` lists all)",
            sum(unhandled[task] for task in due),
            len(due),
            ", ".join(f"{task!r} ({unhandled[task]})" for task in busiest),
            f" and {len(due) - len(busiest)} more" if len(due) > len(busiest) else "",
        )
