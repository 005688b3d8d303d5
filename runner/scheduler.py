"""The coordinator's schedules: which exist, when the next slot is due, and firing it.

The coordinator calls ``run_pass(landed)`` once per pass and waits at most
``seconds_until_due()``, so a slot fires within a pass of its time: it sleeps until the slot, not
a poll. schedules/ is read again when watchdog says a file there landed or changed, and once a
second besides (a removal, a lost event); only files whose inode, size or times changed are
parsed again. A broken file is logged once per change of it, fires nothing, and touches no other
schedule; a file that is not ``<name>.yaml`` is logged once as ignored.

Which slots fire. ``through[name]`` is the last slot already handled (fired, or passed over by
``catchup`` or ``overlap: skip``). On first sight, and whenever the schedule's file changes, it
is the last slot fired as ``schedules/.<name>.fired`` records it (spool.schedule.fired: in the files, so
a purge and a lost ledger change nothing; a firing a crash cut short is finished first), and
never before the file's mtime (a schedule written or enabled then starts then; after ``rm`` and
``add`` the record is gone and it starts afresh). Of the slots after it that are due now:

- those that came due before ``live_since`` were missed: ``catchup: none`` fires none of them,
  ``one`` (default) the latest, ``all`` each (at most ``MAX_FIRINGS``, the latest ones). That is
  every slot before this coordinator's first pass (no coordinator ran), and every slot a wall
  clock jumped over: a pass that sees the wall clock advance ``CLOCK_STEP_SECONDS`` more than the
  monotonic clock moves ``live_since`` up to the monotonic time that really passed;
- those that came due since fire, each (a pass that ran late fires every slot it passed).

``overlap: skip`` passes over a slot while the previous firing's job is neither done nor dead.
A wall clock stepped back less than a slot fires nothing until it passes ``through`` again; one
stepped back further (``through`` more than a slot ahead of it) is logged and the schedule fires
again from now (``scheduling.resume_from``): whatever this process believes, a slot's key makes a
second firing of it return the first job while that job is kept. A slot whose key is held by a
job the schedule did not make (submitted before ``schedule:`` keys were reserved) is passed over,
logged, and never taken for the schedule's own.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Callable, Iterable

from spool.schedule import fired as firings
from spool.base.errors import DiskFull, InvalidJob, LedgerError, NotFound, TryLater, Withdrawn
from spool.disk import SCHEDULES, is_ignored_name
from spool.schedule import Schedule, key_prefix, slot_key, slot_of_key
from spool.schedule import Entry, entries, fire, ignored, resume_from
from spool.spool import Spool
from spool.moves import state_of
from spool.moves import job_of_spec
from spool.base.timetext import format_time, parse_time

log = logging.getLogger("spool.coordinator")

RESCAN_SECONDS = 1.0
MAX_FIRINGS = 1000  # per schedule and pass: `catchup: all` after a long downtime is bounded
RETRY_SECONDS = 1.0  # after a firing the disk refused (full)
_OLD_CACHE = "schedule_fired:"  # ledger meta: name -> a slot, where firings were cached before the records
CLOCK_STEP_SECONDS = 2.0  # wall minus monotonic between two passes past this: the wall clock was stepped


class Scheduler:
    def __init__(
        self, sp: Spool, *, wall: Callable[[], float] = time.time, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.sp = sp
        self.wall = wall
        self.clock = clock
        self.live_since: float | None = None  # wall time: slots due before it were missed (catchup decides)
        self.seen: tuple[float, float] | None = None  # (wall, monotonic) at the last pass
        self.entries: dict[str, Entry] = {}
        self.through: dict[str, float] = {}
        self.next_due: dict[str, float] = {}
        self.last_job: dict[str, str] = {}
        self.reported: dict[str, tuple[int, ...]] = {}  # name -> the broken file's signature we logged
        self.ignored: set[str] = set()  # files in schedules/ we logged as no schedule
        self.last_scan = -math.inf
        self.unsynced = False  # a record was renamed into schedules/ since its last fsync

    def run_pass(self, landed: Iterable[tuple[str, str]] = (), *, budget_seconds: float = math.inf) -> None:
        """Fire what is due, soonest first, for at most ``budget_seconds`` (past the first firing):
        what is left stays due, so the coordinator's next pass, which comes at once, goes on
        with it after its lease watch. A storm of firings never starves lease expiry."""
        now = self.wall()
        self._watch_clock(now, self.clock())
        changed = any(folder == SCHEDULES and not is_ignored_name(name) for folder, name in landed)
        if changed or self.clock() - self.last_scan >= RESCAN_SECONDS:
            self.scan()
        until = self.clock() + budget_seconds
        for n, (name, due) in enumerate(sorted(self.next_due.items(), key=lambda item: item[1])):
            if due > now or (n and self.clock() >= until):
                break
            self._fire_due(self.entries[name], now, until)
        if self.unsynced:  # one fsync of schedules/ makes every record this pass wrote durable
            firings.sync(self.sp)
            self.unsynced = False

    def seconds_until_due(self) -> float:
        """How long the coordinator may sleep before a slot is due (inf: none is)."""
        if not self.next_due:
            return math.inf
        return max(min(self.next_due.values()) - self.wall(), 0.0)

    def _watch_clock(self, now: float, monotonic: float) -> None:
        """Tell a wall clock that was stepped (NTP, a person, a resumed VM) from time passing."""
        if self.seen is None or self.live_since is None:
            self.live_since = now  # our first pass: what came due before it was missed
        else:
            wall_was, monotonic_was = self.seen
            passed = monotonic - monotonic_was
            step = (now - wall_was) - passed
            if step > CLOCK_STEP_SECONDS:
                log.warning(
                    "the wall clock jumped %.0fs ahead; the slots it skipped count as missed (each schedule's catchup)",
                    step,
                )
                self.live_since = max(self.live_since, now - passed)
            elif step < -CLOCK_STEP_SECONDS:
                log.warning("the wall clock stepped %.0fs back", -step)
                self.live_since = min(self.live_since, now - passed)
                for name, entry in self.entries.items():
                    if entry.schedule is not None and name in self.through:
                        self._resume(entry.schedule, now)
        self.seen = (now, monotonic)

    def _resume(self, schedule: Schedule, now: float) -> None:
        """Apply ``resume_from``: a ``through`` more than a slot ahead of the clock fires from now."""
        name, through = schedule.name, self.through[schedule.name]
        resumed = resume_from(schedule, through, now)
        if resumed == through:
            return
        log.warning(
            "schedule %s: its last slot %s is more than a slot ahead of the clock (%s): the clock was stepped "
            "back; it fires again from now",
            name,
            format_time(through),
            format_time(now),
        )
        self.through[name] = resumed
        if name in self.next_due:
            self.next_due[name] = schedule.next_slot(resumed)

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
        self._report_ignored()

    def _report_ignored(self) -> None:
        current = ignored(self.sp)
        for file_name in sorted(set(current) - self.ignored):
            log.warning("%s", current[file_name])
        self.ignored = set(current)

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
        fired = firings.read_fired(self.sp, name)
        if fired.slot is None and fired.firing is None:
            self.through.pop(name, None)  # never fired, or ``rm`` removed its record: afresh
            fired = firings.Fired(slot=self._before_records(schedule))
        elif fired.job is not None and name not in self.last_job:
            self.last_job[name] = fired.job
        first_sight = name not in self.through
        recorded = max(fired.slot or -math.inf, fired.firing or -math.inf)
        self.through[name] = max(self.through.get(name, -math.inf), recorded)
        if first_sight and fired.unfinished is not None:
            # A firing of that slot began and never ended: a coordinator died inside it (nothing
            # submitted yet, the key reserved, or the job made). We finish it by firing the slot
            # again, whatever the catchup: its key makes that one job.
            self._fire(schedule, fired.unfinished)
        # Slots before the file was (re)written were not this file's: an enable fires no backlog.
        now = self.wall()
        self.through[name] = max(self.through[name], entry.written)
        self.through[name] = resume_from(schedule, self.through[name], now)
        if schedule.enabled:
            self.next_due[name] = schedule.next_slot(self.through[name])
            upcoming = schedule.next_slot(max(self.through[name], now))
            due = self.next_due[name]
            behind = f"; slots due since {format_time(due)} go by catchup {schedule.catchup}" if due <= now else ""
            log.info("schedule %s (%s): next slot %s%s", name, schedule.expression, format_time(upcoming), behind)
        else:
            self.next_due.pop(name, None)

    def _before_records(self, schedule: Schedule) -> float | None:
        """The last slot a spool from before schedules/.<name>.fired fired: the greatest key among
        the schedule's own jobs, or the ledger's old cache of it, never one past now. A lower
        bound only (it can hold a firing back, never make one); the next firing writes a record."""
        name, found = schedule.name, -math.inf
        try:
            cached = self.sp.ledger.meta(_OLD_CACHE + name)
            found = parse_time(cached, "slot").timestamp() if cached else found
            row = self.sp.ledger.last_keyed(key_prefix(name))
        except (LedgerError, InvalidJob):
            row = None
        slot = slot_of_key(row[0]) if row else None
        if row and slot is not None and self._is_own(schedule, slot, row[1]):
            found = max(found, slot)
        return found if -math.inf < found <= self.wall() else None

    def _forget(self, name: str) -> None:
        self.through.pop(name, None)
        self.next_due.pop(name, None)
        self.last_job.pop(name, None)
        self.reported.pop(name, None)

    # -- firing ------------------------------------------------------------------------------

    def _fire_due(self, entry: Entry, now: float, until: float = math.inf) -> None:
        schedule = entry.schedule
        assert schedule is not None
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
        assert self.live_since is not None
        through = self.through[schedule.name]
        missed: list[float] = []
        if through < self.live_since and schedule.catchup != "none":
            limit = 1 if schedule.catchup == "one" else MAX_FIRINGS
            missed = _latest_slots(schedule, through, self.live_since, limit)
        return missed + _latest_slots(schedule, max(through, self.live_since), now, MAX_FIRINGS)

    def _fire(self, schedule: Schedule, slot: float) -> bool:
        """Submit the slot's job; False when the disk refused it (retried in a moment).

        The firing is begun in the schedule's record before the submit and recorded after it
        (spool.schedule.fired): a coordinator that dies between leaves the slot for the next one to
        finish, whatever its catchup, and once recorded no coordinator fires it again."""
        name = schedule.name
        try:
            firings.begin(self.sp, name, slot)
            submitted = fire(self.sp, schedule, slot)
        except (DiskFull, TryLater) as err:
            log.error("schedule %s: slot %s not fired yet: %s", name, format_time(slot), err)
            return False
        except InvalidJob as err:  # the template makes a job over max_job_bytes, or the like
            log.error("schedule %s: slot %s can't fire: %s", name, format_time(slot), err)
            return True
        except Withdrawn:  # a purge of its job recorded it fired since we read the record
            log.info("schedule %s: slot %s recorded fired (its job purged): not fired again", name, format_time(slot))
            return True
        job: str | None = submitted.id
        if submitted.created:
            log.info("schedule %s fired slot %s: job %s", name, format_time(slot), submitted.id)
        elif not self._is_own(schedule, slot, submitted.id):
            log.warning(
                "schedule %s: slot %s not fired: its key is held by job %s, which this schedule did not make "
                "(a `schedule:` key submitted by hand before those were reserved); passed over",
                name,
                format_time(slot),
                submitted.id,
            )
            job = None
        if job is not None:
            self.last_job[name] = job
        try:
            firings.record(self.sp, name, slot, job)
            self.unsynced = True
        except DiskFull as err:  # the job is durable; the next coordinator finishes the record
            log.error("schedule %s: slot %s fired, its record not written yet: %s", name, format_time(slot), err)
        return True

    def _is_own(self, schedule: Schedule, slot: float, job_id: str) -> bool:
        """Whether the job under the slot's key is what this schedule submits for it (not a job
        someone else planted under that key). A job we can't read right now counts as ours."""
        try:
            _state, job_file = self.sp.job(job_id)
            expected = job_of_spec(
                self.sp, schedule.spec(slot_key(schedule.name, slot)), job_id=job_id, where="", firing=True
            )
        except (FileNotFoundError, NotFound, InvalidJob):
            return True
        return dataclasses.replace(job_file.job, id=job_id) == expected

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
