"""Schedules: the file format and its slots (``format``), the schedules/ folder and its commands
(``folder``), and the record of what each schedule fired (``fired``). The coordinator's loop that
fires them is ``spool.runner.scheduler``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from spool.base.surface import lazy_surface

if TYPE_CHECKING:  # the surface runner/ and cli/ import (spool.base.surface)
    from spool.schedule import fired as fired, folder as folder
    from spool.schedule.folder import (
        Entry as Entry,
        entries as entries,
        fire as fire,
        ignored as ignored,
        lag_seconds as lag_seconds,
        resume_from as resume_from,
    )
    from spool.schedule.format import (
        CATCHUPS as CATCHUPS,
        InvalidSchedule as InvalidSchedule,
        OVERLAPS as OVERLAPS,
        Schedule as Schedule,
        key_prefix as key_prefix,
        slot_key as slot_key,
        slot_of_key as slot_of_key,
    )

__getattr__ = lazy_surface(__name__, __file__)
