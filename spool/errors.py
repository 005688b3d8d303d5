"""The error classes, where a user's code catches them: ``except spool.errors.TryLater``.

They live on the floor (``spool.base.errors``, which every layer imports); this module is the
name users were given before the layers had folders, kept so their scripts go on working. The
common ones are also on the package itself: ``from spool import InvalidJob, TryLater``.
"""

from __future__ import annotations

from spool.base.errors import (
    AlreadyTerminal,
    DiskFull,
    DurabilityError,
    InvalidJob,
    LeaseLost,
    LedgerError,
    LedgerUnusable,
    NotASpool,
    NotClaimable,
    NotFound,
    SpoolError,
    TransitionLost,
    TryLater,
    UsageError,
    Withdrawn,
)

__all__ = [
    "AlreadyTerminal",
    "DiskFull",
    "DurabilityError",
    "InvalidJob",
    "LeaseLost",
    "LedgerError",
    "LedgerUnusable",
    "NotASpool",
    "NotClaimable",
    "NotFound",
    "SpoolError",
    "TransitionLost",
    "TryLater",
    "UsageError",
    "Withdrawn",
]
