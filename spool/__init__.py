"""spool: a crash-safe job runner whose queue is a directory.

The repository keeps ``spool/``, ``runner/`` and ``cli/`` side by side; installed, they are
``spool``, ``spool.runner`` and ``spool.cli``. Run from a source checkout, this package adds the
checkout's root to its own search path so ``spool.runner`` and ``spool.cli`` resolve the same way.
"""

from __future__ import annotations

import os as _os

_here = _os.path.dirname(_os.path.abspath(__file__))
if not _os.path.isdir(_os.path.join(_here, "runner")):
    _checkout = _os.path.dirname(_here)
    if _os.path.isfile(_os.path.join(_checkout, "runner", "__init__.py")):
        __path__.append(_checkout)  # type: ignore[name-defined]  # noqa: F821

from typing import TYPE_CHECKING  # noqa: E402

from spool.errors import SpoolError  # noqa: E402
from spool.registry import Reject, current, task  # noqa: E402

if TYPE_CHECKING:
    from spool.spool import Spool

__all__ = ["Spool", "SpoolError", "Reject", "current", "task"]


def __getattr__(name: str) -> object:
    # ``Spool`` pulls in the ledger and YAML; an attempt child importing ``spool`` for ``@task``
    # needs neither, so it is loaded on first use (child start-up is on the retry path).
    if name == "Spool":
        from spool.spool import Spool

        return Spool
    raise AttributeError(f"module 'spool' has no attribute {name!r}")
