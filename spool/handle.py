"""``Handle``: what every layer of spool/ is given to work on a spool (``sp`` everywhere).

It holds the layout's directory fds, the settings in force, the ledger connection (opened on
first use) and the clock every decision reads. It imports nothing above the data it holds, so
store, the moves, submission, ingest, recovery, transitions, chains, admin, fsck and stats can all take
one without importing the facade: ``spool.spool.Spool`` is a ``Handle`` that also knows how to
open a folder and carries the Python API.

The modules of spool/ import one another only downwards, in this order (each may import any
before it; nothing imports the facade but the package itself):

    errors, clock, records, crash -> fsio, ids, yaml, timetext -> job, layout, locks, ledger.schema
    -> settings, rootdir, ledger -> handle -> store -> moves, submission -> ingest -> recovery
    -> transitions, chains, admin, stats -> fsck -> spool
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Self

from spool.base.clock import SYSTEM, Clock
from spool.disk.layout import Layout
from spool.ledger import Ledger, set_aside
from spool.settings import Settings


class Handle:
    """An open spool as the layers below the facade see it."""

    def __init__(self, layout: Layout, settings: Settings, *, clock: Clock = SYSTEM) -> None:
        self.layout = layout
        self.settings = settings
        self.clock = clock
        self._ledger: Ledger | None = None
        # queues/ into a ledger made anew (``spool.ledger.reservations``), set by the facade, which
        # may import ``spool.queues``: this module imports nothing above it.
        self.sync_limits: Callable[[], object] | None = None
        # A worker's spare heartbeat and job files in tmp/ (``spool.moves.spares``); None: keeps none.
        self.spare_beats: list[str] | None = None
        self.spare_files: list[str] | None = None
        self.unsettled_files: list[str] | None = None
        self.after_pending: list[str] | None = None
        self.after_leased: list[str] | None = None

    @property
    def root(self) -> Path:
        return self.layout.root

    @property
    def ledger(self) -> Ledger:
        """The index, opened on first use (read-only on a read-only mount). Raises LedgerError
        (LedgerUnusable for a corrupt file) or DiskFull; commands that need only the files go on
        without it."""
        if self._ledger is None:
            self._ledger = Ledger(self.layout, read_only=self.read_only, clock=self.clock)
            self._ledger.sync_limits = self.sync_limits
        return self._ledger

    @property
    def read_only(self) -> bool:
        """The spool can't be written (a backup mounted read-only): only looking is possible."""
        if os.fstatvfs(self.layout.root_fd).f_flag & os.ST_RDONLY:
            return True
        proc = f"/proc/self/fd/{self.layout.root_fd}"  # the folder even after a rename of the spool
        return not os.access(proc if os.path.isdir(proc) else self.layout.root, os.W_OK)

    def set_ledger_aside(self) -> str | None:
        """Move an unusable ledger aside; the next use opens a fresh one. Returns its new name."""
        if self._ledger is not None:
            self._ledger.close()
            self._ledger = None
        return set_aside(self.layout, self.clock.wall())

    def close(self) -> None:
        if self._ledger is not None:
            self._ledger.close()
            self._ledger = None
        self.layout.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
