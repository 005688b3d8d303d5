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

__getattr__ = lazy_surface(__name__, __file__)
