"""The ledger: an SQLite index over the job files, never the truth (``core``: the ``Ledger``;
``queries``, ``schema`` and ``file``: its reads, its tables and its file; ``metrics``: what a
scrape folds from its history)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from spool.base.surface import lazy_surface
from spool.ledger.core import Ledger, set_aside

__all__ = ["Ledger", "set_aside"]

if TYPE_CHECKING:  # the surface runner/ and cli/ import besides Ledger (spool.base.surface)
    from spool.ledger.metrics import Durations as Durations, HistoryTotals as HistoryTotals
    from spool.ledger.metrics import catch_up as catch_up, job_counts as job_counts, oldest_ready as oldest_ready
    from spool.ledger.metrics import OTHER as OTHER, capped_queues as capped_queues, shown_queues as shown_queues
    from spool.ledger.metrics import job_counts_by_queue as job_counts_by_queue, ready_by_queue as ready_by_queue
    from spool.ledger.queue_rows import QueueRow as QueueRow

__getattr__ = lazy_surface(__name__, __file__)
