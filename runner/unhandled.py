"""The coordinator's warning about tasks whose ready jobs no live worker handles (local workers by
their locks, remote ones by when the server last heard from them: ``spool.workers``)."""

from __future__ import annotations

import logging

from spool.errors import SpoolError
from spool.spool import Spool
from spool.workers import unhandled_ready, unhandled_warning

log = logging.getLogger("spool.coordinator")


class UnhandledWarner:
    """One WARNING per task whose ready jobs no live worker handles (``spool.workers``), once it
    has been so for the ``unhandled_grace_seconds`` setting (workers starting beside the coordinator have not
    said what they handle yet); again only after a worker for it has come and gone."""

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
        for task, ready in unhandled.items():
            since = self.since.setdefault(task, now)
            if task not in self.warned and now - since >= sp.settings.unhandled_grace_seconds:
                self.warned.add(task)
                log.warning("%d ready job(s) of task %r: %s", ready, task, unhandled_warning(task))
