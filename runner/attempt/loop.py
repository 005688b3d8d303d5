"""The one attempt loop: run a leased job's attempt in the child, beat, relay progress, honour
stop and cancel, and end it, whatever keeps the lease.

``watch`` is written once; what differs between transports is behind ``LeaseKeeper``, the seam
(the shape of dramatiq's ``Broker`` or huey's ``BaseStorage``): a local worker's keeper writes the
files (``runner.worker.FilesLease``), a remote worker's calls the HTTP API
(``runner.remote.worker.ApiLease``). A new transport (an engine, a queue with limits) is one more
keeper; the loop, its timing and its order of checks stay the same for all of them:

1. the child is asked to run the attempt (``Child.begin``), then the keeper hears it started
   (a local claim writes its claimed content only now, while the handler runs);
2. it is polled until the next beat or the next progress write is due, whichever comes first;
3. an outcome is reported at once (complete or fail: the keeper's ``report``);
4. past a stop's grace (or at a second signal) the child is killed and the lease released;
5. a beat (or a progress write, which repeats the last beat's counter: not a beat) goes to the
   keeper, whose answer may end the attempt: the lease was lost (the child is killed, the
   attempt dropped: its lease is someone else's now) or a cancel was asked for (the child is
   killed and the job ends cancelled).
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable
from typing import Protocol

from spool.progress import Progress
from spool.runner.attempt.child import AttemptRequest, Child, Outcome
from spool.runner.attempt.progress_writes import ProgressWrites

POLL_SLICE_SECONDS = 0.5  # the child is polled at least this often, so a stop is seen promptly


class Beat(enum.Enum):
    """What the keeper says after a heartbeat."""

    HELD = "held"  # the lease is ours (or the keeper could not tell: the attempt runs on)
    LOST = "lost"  # expired, requeued or taken: the attempt is dropped
    CANCEL = "cancel"  # someone asked for the job to be cancelled while it runs


class LeaseKeeper(Protocol):
    """One attempt's side of the lease: where its beats, progress and outcome go."""

    def started(self) -> None:
        """The child has the attempt: finish what the claim left for after its start (called
        once, before any other step)."""
        ...

    def heartbeat_seconds(self) -> float:
        """How long until the next beat (it may change between beats: a coordinator restarted
        with a shorter term)."""
        ...

    def beat(self, counter: int, progress: Progress | None, *, is_beat: bool) -> Beat:
        """Send a beat (``is_beat``) or a progress value under the last beat's counter."""
        ...

    def report(self, outcome: Outcome) -> None:
        """Save the attempt's outcome: complete or fail (patiently: a finished attempt is never
        thrown away while its lease holds)."""
        ...

    def release(self) -> None:
        """Give the job back untried (a stop that could not wait for the attempt)."""
        ...

    def lost(self) -> None:
        """The attempt was dropped: say so (its lease is someone else's now)."""
        ...

    def cancelled(self) -> None:
        """End the job cancelled, its child killed."""
        ...


class Chores(Protocol):
    """The worker's own work that may not wait for an attempt to end (``runner.worker``: saving
    the outcomes of attempts that ended before this one, giving back a batch's waiting jobs)."""

    def due(self) -> float:
        """When (``time.monotonic()``) the chores next need a turn; ``math.inf`` for never."""
        ...

    def run(self) -> None:
        """Do what is due."""
        ...


def watch(
    child: Child,
    request: AttemptRequest,
    keeper: LeaseKeeper,
    must_stop_now: Callable[[], bool],
    chores: Chores | None = None,
) -> None:
    """Run one attempt to its end (see the module's steps); returns once the keeper has it.
    ``chores`` get their turns while the child runs, between two polls."""
    child.begin(request)
    keeper.started()
    beats = 0
    next_beat = time.monotonic() + keeper.heartbeat_seconds()
    shown = ProgressWrites()  # the handler's spool.progress(), sent promptly but coalesced
    while True:
        wake = min(next_beat, shown.due())  # a progress value waiting to be written wakes us too
        chores_due = chores.due() if chores is not None else wake
        timeout = max(0.0, min(wake - time.monotonic(), chores_due - time.monotonic(), POLL_SLICE_SECONDS))
        outcome = child.poll(timeout, until_progress=wake == next_beat)
        shown.offer(child.take_progress())
        if outcome is not None:
            keeper.report(outcome)
            return
        if must_stop_now():
            child.kill()
            keeper.release()
            return
        if chores is not None and time.monotonic() >= chores.due():
            chores.run()
        beat_due = time.monotonic() >= next_beat
        if not beat_due and shown.due() > time.monotonic():
            continue
        beats += 1 if beat_due else 0  # progress alone repeats the counter: not a beat
        said = keeper.beat(beats, shown.write(), is_beat=beat_due)
        if beat_due:
            next_beat = time.monotonic() + keeper.heartbeat_seconds()
        if said is Beat.LOST:
            child.kill()
            keeper.lost()
            return
        if said is Beat.CANCEL:
            child.kill()
            keeper.cancelled()
            return
