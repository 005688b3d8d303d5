"""A schedule's slot fires at most once when a purge falls inside a takeover's firing.

The model checker found it (models/slots.pml; the trail is kept by
tests/models/test_models.py): a coordinator that takes over finishes a firing the dead one began
(it read the record: unfinished), and a ``spool purge`` of that slot's job between that read and
its submit records the slot fired, then removes the job and its key: the submit found the key free
and made the slot a second job. Each step here is the real code on a real spool, in the order of
the model's trail; the interleaving is the test's own, so it happens every time."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from spool import Spool
from spool.admin import cancel, purge
from spool.base.errors import Withdrawn
from spool.schedule import fired as firings
from spool.schedule import folder as scheduling
from support import wait_until


def test_a_takeovers_firing_does_not_make_again_a_slot_a_purge_recorded(tmp_path: Path) -> None:
    sp = Spool.init(tmp_path / "spool", environ={})
    try:
        fields = scheduling.schedule_fields(
            cron=None, tz=None, every="1h", task="echo", args={"n": 1}, priority=None, max_tries=None, timeout=None
        )
        schedule = scheduling.add(sp, "tick", fields)
        slot = schedule.last_slot(time.time())
        # The first coordinator begins the firing and makes the job, then dies before its record
        # (coordinator:after-commit).
        firings.begin(sp, "tick", slot)
        made = scheduling.fire(sp, schedule, slot)
        assert made.created
        # The coordinator taking over reads the record: that firing is unfinished, to finish.
        assert firings.read_fired(sp, "tick").unfinished == slot
        # Meanwhile a person cancels the slot's job and purges it: the purge records the slot
        # fired first, then removes the job and its key.
        cancel(sp, made.id)
        wait_until(
            lambda: purge(sp, 0.0) == [made.id] or not (sp.root / "dead").joinpath(f"{made.id}.yaml").exists(), 10
        )
        assert (firings.read_fired(sp, "tick").slot or 0) >= slot
        # The takeover finishes the firing it read: the key is free, the record says fired.
        with pytest.raises(Withdrawn):
            scheduling.fire(sp, schedule, slot)
        jobs = [
            p.name for state in ("pending", "waiting", "leased", "done", "dead") for p in (sp.root / state).iterdir()
        ]
        assert [name for name in jobs if not name.startswith(".")] == []  # the slot was not made again
    finally:
        sp.close()
