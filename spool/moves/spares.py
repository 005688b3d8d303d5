"""Spare heartbeat files: a worker keeps the heartbeat file of each attempt it finishes and gives
it to the next job it claims, in place of removing one file and creating another.

A removed file frees its block and a new file's first write allocates one; on this project's
root disk (ext4 mounted with ``discard``, no journal) the free also trims the block before the
removal returns. A kept file is renamed twice instead and its block is rewritten in place: the
backlog's drain on the root disk +4-8% in the medians of an A/B, level elsewhere
(docs/performance.md, "The floor of a backlog's drain").

A spare waits in tmp/ under a staging name (``tmp_name``: ``<pid>-<random>.tmp``): nothing
watches tmp/, and the tmp sweep removes the spares of a worker that died (its pid is gone).
Only a handle whose ``spare_beats`` is a list keeps spares (a worker sets it); every other
process removes a finished attempt's heartbeat as before. Heartbeats are hints, never fsync'd:
a crash between any two steps leaves a spare in tmp/ (garbage for the sweep) or a heartbeat under
its name (what ``first_beat`` writes anyway), so there is nothing to finish or undo.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from spool.disk.fsio import fs
from spool.disk.layout import State, tmp_name

if TYPE_CHECKING:
    from spool.handle import Handle

SPARES_MOST = 128  # two of a worker's largest batch claims (runner.batching): more are removed


def begin(sp: Handle) -> None:
    """From now on this handle keeps spares (a worker starting)."""
    sp.spare_beats = []


def keep(sp: Handle, beat_name: str) -> bool:
    """Move a finished attempt's heartbeat file (``beat_name`` in leased/) to tmp/ as a spare;
    False when this handle keeps none or has enough, or the move failed: the caller removes it."""
    spares = sp.spare_beats
    if spares is None or len(spares) >= SPARES_MOST:
        return False
    spare = tmp_name()
    try:
        fs.rename_noreplace(sp.layout.fd(State.LEASED), beat_name, sp.layout.fd("tmp"), spare)
    except OSError:
        return False
    spares.append(spare)
    return True


def take(sp: Handle) -> str | None:
    """A spare's name in tmp/, now the caller's to rename into place or remove; None: none kept."""
    return sp.spare_beats.pop() if sp.spare_beats else None


def remove(sp: Handle, spare: str) -> None:
    try:
        fs.unlink(sp.layout.fd("tmp"), spare, missing_ok=True)
    except OSError:
        pass  # a planted directory under the name: left in tmp/ for a person (fsck lists it)


def drop_all(sp: Handle) -> None:
    """Remove every spare this handle keeps (a worker stopping) and keep no more."""
    spares, sp.spare_beats = sp.spare_beats or [], None
    for spare in spares:
        remove(sp, spare)
