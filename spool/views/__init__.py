"""Read-only views over a spool: listings and pages (``browse``), a job's chain (``chainview``),
the counts ``spool stats`` and the metrics show (``stats``), what the dashboard shows running
and per task and queue (``dashboard_now``), and the queues (``queueview``, which
brings hand-edited queue files into the ledger first). Nothing here writes a job's file."""

from __future__ import annotations

from typing import TYPE_CHECKING

from spool.base.surface import lazy_surface

if TYPE_CHECKING:  # the surface runner/ and cli/ import (spool.base.surface)
    from spool.views import browse as browse
    from spool.views import dashboard_now as dashboard_now
    from spool.views.browse import Filter as Filter
    from spool.views.queueview import held_by as held_by, queue_views as queue_views
    from spool.views.queueview import queue_views_from_files as queue_views_from_files
    from spool.views.stats import collect as collect, coordinator_state as coordinator_state

__getattr__ = lazy_surface(__name__, __file__)
