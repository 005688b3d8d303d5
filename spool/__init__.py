"""spool: a crash-safe job runner whose queue is a directory.

The repository keeps ``spool/``, ``runner/`` and ``cli/`` side by side; installed (``pip install .``,
or ``pip install -e .`` to work on the code), they are ``spool``, ``spool.runner`` and ``spool.cli``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from spool.base.errors import DiskFull, InvalidJob, NotFound, SpoolError, TryLater
from spool.progress import progress
from spool.registry import Reject, current, task

if TYPE_CHECKING:
    from spool.spool import Spool

# ``spool.progress`` is the function (what a handler calls); its module is imported by name:
# ``from spool.progress import Progress, read_progress``.
__all__ = [
    "Spool",
    "SpoolError",
    "InvalidJob",
    "NotFound",
    "TryLater",
    "DiskFull",
    "Reject",
    "current",
    "progress",
    "task",
]


def __getattr__(name: str) -> object:
    # ``Spool`` pulls in the ledger and YAML; an attempt child importing ``spool`` for ``@task``
    # needs neither, so it is loaded on first use (child start-up is on the retry path).
    if name == "Spool":
        from spool.spool import Spool  # start-up: the attempt child never needs the facade

        return Spool
    raise AttributeError(f"module 'spool' has no attribute {name!r}")
