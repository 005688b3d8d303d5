"""The coordinator's schedules: which exist, when the next slot is due, and firing it.

The coordinator calls ``run_pass(landed)`` once per pass and waits at most
``seconds_until_due()``, so a slot fires within a pass of its time: it sleeps until the slot, not
a poll. schedules/ is read again when watchdog says a file there landed or changed, and once a
second besides (a removal, a lost event); only files whose inode, size or times changed are
parsed again. A broken file is logged once per change of it, fires nothing, and touches no other
schedule.

Which slots fire. ``through[name]`` is the last slot already handled (fired, or passed over by
``catchup`` or ``overlap: skip``). On first sight it is the greatest slot the schedule's jobs
carry in their keys (the ledger, rebuilt from the job files), or the cached last slot in the
ledger's meta (which covers a purged job; a firing a crash cut short is finished first), and
never before the file's mtime (a schedule written or enabled then starts then). Of the slots
after it that are due now:

- those that came due before this coordinator's first pass were missed while no coordinator
  ran: ``catchup: none`` fires none of them, ``one`` (default) the latest, ``all`` each (at most
  ``MAX_FIRINGS``, the latest ones);
- those that came due since fire, each (a pass that ran late fires every slot it passed).

``overlap: skip`` passes over a slot while the previous firing's job is neither done nor dead.
A wall clock stepped back fires nothing until it passes ``through`` again, and whatever this
process believes, a slot's key makes a second firing of it return the first job.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterable

from spool.errors import DiskFull, InvalidJob, LedgerError, TryLater
from spool.layout import SCHEDULES
from spool.schedules import Schedule
from spool.scheduling import Entry, entries, fire, last_fired
from spool.spool import Spool
from spool.store import state_of
from spool.timetext import format_time, parse_time

log = logging.getLogger("spool.coordinator")

RESCAN_SECONDS = 1.0
MAX_FIRINGS = 1000  # per schedule and pass: `catchup: all` after a long downtime is bounded
RETRY_SECONDS = 1.0  # after a firing the disk refused (full)
_FIRING, _FIRED = "schedule_firing:", "schedule_fired:"  # ledger meta: name -> a slot (the cache below)


class Scheduler:
    def __init__(
        self, sp: Spool, *, wall: Callable[[], float] = time.time, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.sp = sp
        self.wall = wall
        self.clock = clock
        self.started: float | None = None  # wall time of our first pass: slots before it were missed
        self.entries: dict[str, Entry] = {}
        self.through: dict[str, float] = {}
        self.next_due: dict[str, float] = {}
        self.last_job: dict[str, str] = {}
        self.reported: dict[str, tuple[int, ...]] = {}  # name -> the broken file's signature we logged
        self.last_scan = -math.inf

    def run_pass(self, landed: Iterable[tuple[str, str]] = (), *, budget_seconds: float = math.inf) -> None:
        """Fire what is due, soonest first, for at most ``budget_seconds`` (past the first firing):
        what is left stays due, so the coordinator's next pass, which comes at once, goes on
        with it after its lease watch. A storm of firings never starves lease expiry."""
        now = self.wall()
        if self.started is None:
            self.started = now
        if any(folder == SCHEDULES for folder, _name in landed) or self.clock() - self.last_scan >= RESCAN_SECONDS:
            self.scan()
        until = self.clock() + budget_seconds
        for n, (name, due) in enumerate(sorted(self.next_due.items(), key=lambda item: item[1])):
            if due > now or (n and self.clock() >= until):
                return
            self._fire_due(self.entries[name], now, until)

    def seconds_until_due(self) -> float:
        """How long the coordinator may sleep before a slot is due (inf: none is)."""
        if not self.next_due:
            return math.inf
        return max(min(self.next_due.values()) - self.wall(), 0.0)

    # -- the files ---------------------------------------------------------------------------

    def scan(self) -> None:
        self.last_scan = self.clock()
        found = entries(self.sp, self.entries)
        for name in set(self.entries) - set(found):
            log.info("schedule %s removed", name)
            self._forget(name)
        for name, entry in found.items():
            if self.entries.get(name) is not entry:
                self._changed(entry)
        self.entries = found

    def _changed(self, entry: Entry) -> None:
        name = entry.name
        if entry.schedule is None:
            self.next_due.pop(name, None)
            if self.reported.get(name) != entry.signature:
                self.reported[name] = entry.signature
                log.error("schedule %s fires nothing until its file is fixed: %s", name, entry.error)
            return
        if name in self.reported:
            del self.reported[name]
            log.info("schedule %s is valid again", name)
        schedule = entry.schedule
        if name not in self.through:
            fired = last_fired(self.sp, name)
            if fired is not None:
                self.last_job[name] = fired.job_id
            keyed = fired.slot if fired else -math.inf
            begun, done = self._cached(_FIRING, name), self._cached(_FIRED, name)
            self.through[name] = max(keyed, begun, done)
            if begun > max(keyed, done):
                # A firing of ``begun`` started and never ended: a coordinator died inside it
                # (nothing written yet, the key reserved, or the job made). We finish it by
                # firing the slot again, whatever the catchup: its key makes that one job.
                self._fire(schedule, begun)
        # Slots before the file was (re)written were not this file's: an enable fires no backlog.
        self.through[name] = max(self.through[name], entry.written)
        if schedule.enabled:
            self.next_due[name] = schedule.next_slot(self.through[name])
            log.info("schedule %s (%s): next slot %s", name, schedule.expression, format_time(self.next_due[name]))
        else:
            self.next_due.pop(name, None)

    def _forget(self, name: str) -> None:
        self.through.pop(name, None)
        self.next_due.pop(name, None)
        self.last_job.pop(name, None)
        self.reported.pop(name, None)

    # -- firing ------------------------------------------------------------------------------

    def _fire_due(self, entry: Entry, now: float, until: float = math.inf) -> None:
        schedule = entry.schedule
        assert schedule is not None and self.started is not None
        for n, slot in enumerate(self._slots_to_fire(schedule, now)):
            if n and self.clock() >= until:  # out of budget: the slots after ``through`` stay due
                self.next_due[schedule.name] = schedule.next_slot(self.through[schedule.name])
                return
            if schedule.overlap == "skip" and self._previous_running(schedule.name):
                log.info(
                    "schedule %s: slot %s passed over, its previous job is still running",
                    schedule.name,
                    format_time(slot),
                )
            elif not self._fire(schedule, slot):
                self.next_due[schedule.name] = now + RETRY_SECONDS
                return
            self.through[schedule.name] = slot
        self.through[schedule.name] = max(self.through[schedule.name], schedule.last_slot(now))
        self.next_due[schedule.name] = schedule.next_slot(self.through[schedule.name])

    def _slots_to_fire(self, schedule: Schedule, now: float) -> list[float]:
        assert self.started is not None
        through = self.through[schedule.name]
        missed: list[float] = []
        if through < self.started and schedule.catchup != "none":
            limit = 1 if schedule.catchup == "one" else MAX_FIRINGS
            missed = _latest_slots(schedule, through, self.started, limit)
        return missed + _latest_slots(schedule, max(through, self.started), now, MAX_FIRINGS)

    def _fire(self, schedule: Schedule, slot: float) -> bool:
        """Submit the slot's job; False when the disk refused it (retried in a moment).

        The slot is cached as begun before the submit and as ended after it: a coordinator that
        dies between leaves the slot for the next one to finish, whatever its catchup."""
        self._cache(_FIRING, schedule.name, slot)
        try:
            submitted = fire(self.sp, schedule, slot)
        except (DiskFull, TryLater) as err:
            log.error("schedule %s: slot %s not fired yet: %s", schedule.name, format_time(slot), err)
            return False
        except InvalidJob as err:  # the template makes a job over max_job_bytes, or the like
            log.error("schedule %s: slot %s can't fire: %s", schedule.name, format_time(slot), err)
            return True
        self.last_job[schedule.name] = submitted.id
        self._cache(_FIRED, schedule.name, slot)
        if submitted.created:
            log.info("schedule %s fired slot %s: job %s", schedule.name, format_time(slot), submitted.id)
        return True

    # The cache beside the keys, in the ledger's meta: the last slot whose firing began, and the
    # last one whose firing ended. "Ended" survives a purge of the job (and its key), so a restart
    # never fires that slot again; "began" past "ended" names a firing a crash cut short. Only a
    # hint: without it (a ledger rebuilt) the keys decide, and a reservation left without its job
    # is what a crashed submit leaves (fsck --repair removes it).

    def _cached(self, which: str, name: str) -> float:
        try:
            text = self.sp.ledger.meta(which + name)
            return parse_time(text, "slot").timestamp() if text else -math.inf
        except (LedgerError, InvalidJob):
            return -math.inf

    def _cache(self, which: str, name: str, slot: float) -> None:
        try:
            self.sp.ledger.set_meta(**{which + name: format_time(slot)})
        except (LedgerError, DiskFull) as err:
            log.debug("schedule %s: slot not cached: %s", name, err)

    def _previous_running(self, name: str) -> bool:
        job_id = self.last_job.get(name)
        if job_id is None:
            return False
        state = state_of(self.sp, job_id)
        return state is not None and not state.terminal


def _latest_slots(schedule: Schedule, after: float, until: float, limit: int) -> list[float]:
    """The last ``limit`` slots in (``after``, ``until``], oldest first: walked back from ``until``,
    so a long downtime costs ``limit`` steps, not one per slot missed."""
    found: list[float] = []
    slot = schedule.last_slot(until)
    while slot > after and len(found) < limit:
        found.append(slot)
        slot = schedule.last_slot(slot - 1)  # slots are whole seconds
    return found[::-1]
