"""Spare files: a worker keeps the files it is done with in tmp/ and writes its next ones into
them, in place of removing one file and creating another.

A removed file frees its block and a new file's first write allocates one; on this project's
root disk (ext4 mounted with ``discard``, no journal) the free also trims the block before the
removal returns, a new file fsync'd costs three times the CPU of an old one rewritten
(docs/performance.md, "Spare job files"), and every file created in the next minutes passes over
the freed inode (the allocator's ``recently_deleted`` walk: "A file's birth costs what the last
minutes' deletions make it"). Two kinds, each in its own list on the handle:

- **heartbeats** (``spare_beats``): a finished attempt's heartbeat file, given to the next job
  the worker claims (``spool.moves.fence``). Hints, never fsync'd: a crash between any two steps
  leaves a spare in tmp/ (garbage for the sweep) or a heartbeat under its name (what
  ``first_beat`` writes anyway), so there is nothing to finish or undo.
- **job files** (``spare_files``): a claim (of one job or a batch) swaps its staged content with
  the copy it just renamed into leased/ (``swap_in``: ``fs.rename_exchange``, one step, the same
  commit as a replace) and keeps the old copy; a completion moves the leased/ copy to tmp/ in
  place of removing it. Whatever
  ``store.stage`` writes next (a claimed content, a result, a done file) is written over a spare
  (``fs.rewrite_spare``), synced and renamed or linked into place as a new file would be.

A job file is rewritten only once no name but its tmp/ one can survive a power cut: its old names
(pending/ and leased/ for a claim's, leased/ for a completion's) must be durably gone first, or
a power cut could bring one back naming the new content (a job file under another job's name).
So a kept file waits in ``unsettled`` until a claim has fsync'd leased/, and a claim's old copy
then in ``after_pending`` until pending/ is fsync'd too (``settle_claims``); only then may
``take_file`` hand it out. A worker's single claim swaps its content in after leased/'s fsync
(``claiming.Opening``: the handler starts first), so its old copy waits in ``after_leased`` for
the next fsync of leased/ before it joins ``after_pending``. That fsync of pending/ is for reuse
alone (a power cut that brings pending/<id> back beside the claimed leased/<id> is settled by
advancement: the claim's copy wins), so it is not on the pickup path: the worker makes it as the
first chore while the attempt runs (``runner.batching``); until then a claim writes new files.
A crash anywhere leaves a spare under a staging name in tmp/ (``tmp_name``:
``<pid>-<random>.tmp``): nothing reads tmp/, and the tmp sweep removes the spares of a worker
that died (its pid is gone). Only a handle that ``begin`` set keeps spares (a worker); every
other process removes and creates files as before.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from spool.disk.fsio import fs
from spool.disk.layout import State, job_name, tmp_name

if TYPE_CHECKING:
    from spool.handle import Handle

SPARES_MOST = 256  # two of a worker's largest batch claims (runner.batching): more are removed


def begin(sp: Handle) -> None:
    """From now on this handle keeps spares (a worker starting)."""
    sp.spare_beats = []
    sp.spare_files = []
    sp.unsettled_files = []
    sp.after_pending = []
    sp.after_leased = []


def keep(sp: Handle, beat_name: str) -> bool:
    """Move a finished attempt's heartbeat file (``beat_name`` in leased/) to tmp/ as a spare;
    False when this handle keeps none or has enough, or the move failed: the caller removes it."""
    spares = sp.spare_beats
    if spares is None or len(spares) >= SPARES_MOST:
        return False
    return _moved_to_tmp(sp, State.LEASED, beat_name, spares)


def take(sp: Handle) -> str | None:
    """A spare's name in tmp/, now the caller's to rename into place or remove; None: none kept."""
    return sp.spare_beats.pop() if sp.spare_beats else None


def remove(sp: Handle, spare: str) -> None:
    try:
        fs.unlink(sp.layout.fd("tmp"), spare, missing_ok=True)
    except OSError:
        pass  # a planted directory under the name: left in tmp/ for a person (fsck lists it)


def keeps_files(sp: Handle) -> bool:
    """Whether this handle keeps spare job files (a worker's): a claim then exchanges."""
    return sp.unsettled_files is not None


def keep_moved(sp: Handle, state: State, name: str) -> bool:
    """Move ``state``/``name``, a job's copy no longer needed (its file is in done/ or dead/), to
    tmp/ as a spare, kept until ``settle``; False when this handle keeps none or has enough, or
    the move failed: the caller removes the copy."""
    if not _room_for_files(sp):
        return False
    assert sp.unsettled_files is not None  # (_room_for_files)
    return _moved_to_tmp(sp, state, name, sp.unsettled_files)


def _room_for_files(sp: Handle) -> bool:
    """This handle keeps job files and has fewer than ``SPARES_MOST``, settled or not."""
    unsettled = sp.unsettled_files
    kept = len(sp.spare_files or ()) + len(sp.after_pending or ()) + len(sp.after_leased or ())
    return unsettled is not None and len(unsettled) + kept < SPARES_MOST


def _moved_to_tmp(sp: Handle, state: State, name: str, kept: list[str]) -> bool:
    """Rename ``state``/``name`` to a staging name in tmp/ and add it to ``kept``; False when
    the move failed (the caller removes the file)."""
    spare = tmp_name()
    try:
        fs.rename_noreplace(sp.layout.fd(state), name, sp.layout.fd("tmp"), spare)
    except OSError:
        return False
    kept.append(spare)
    return True


def swap_in(sp: Handle, staged: str, job_id: str) -> bool:
    """Put a claim's staged content (``staged`` in tmp/) at leased/<id>.yaml, over the copy just
    renamed there. A worker swaps the two (``rename_exchange``): leased/ then holds exactly what a
    replace would leave, and ``staged`` the old copy, True; the caller keeps it (``keep_swapped``)
    once pending/ and leased/ are fsync'd, or removes it. Else (a handle that keeps no spares, a
    filesystem without the exchange) renamed over it, the old copy freed, False."""
    tmp, leased = sp.layout.fd("tmp"), sp.layout.fd(State.LEASED)
    if keeps_files(sp) and fs.rename_exchange(tmp, staged, leased, job_name(job_id)):
        return True
    fs.rename_replace(tmp, staged, leased, job_name(job_id))
    return False


def keep_swapped(sp: Handle, swapped: list[str]) -> None:
    """leased/ was just fsync'd after a claim's moves: every kept file waiting for that is settled,
    and the old copies the claim swapped out (``swap_in``) wait for pending/'s fsync
    (``settle_claims``); more than the cap are removed."""
    settle(sp)
    for name in swapped:
        _keep_or_remove(sp, name, sp.after_pending)


def keep_swapped_late(sp: Handle, swapped: str) -> None:
    """A claim swapped its content in after its fsync of leased/ (``claiming.Opening``): the old
    copy now in tmp/ as ``swapped`` waits for the next fsync of leased/, then for pending/'s."""
    _keep_or_remove(sp, swapped, sp.after_leased)


def _keep_or_remove(sp: Handle, name: str, waiting: list[str] | None) -> None:
    """Add the spare ``name`` to ``waiting`` (one of the handle's lists) while there is room,
    else remove it."""
    if waiting is not None and _room_for_files(sp):
        waiting.append(name)
    else:
        remove(sp, name)


def settle(sp: Handle) -> None:
    """leased/ was fsync'd after every unsettled file's old name there went (a completion's copy;
    a claim's waits in ``after_pending`` for pending/ too): they may be rewritten now. A late
    claim's old copy (``after_leased``) moves on to wait for pending/'s fsync."""
    if sp.unsettled_files and sp.spare_files is not None:
        sp.spare_files += sp.unsettled_files
        sp.unsettled_files.clear()
    if sp.after_leased and sp.after_pending is not None:
        sp.after_pending += sp.after_leased
        sp.after_leased.clear()


def settle_claims(sp: Handle) -> None:
    """fsync pending/, after which the claims' old copies may be rewritten (repeatable; nothing
    to do, no fsync). A failed fsync removes them and raises (a retried fsync proves nothing)."""
    waiting = sp.after_pending
    if not waiting:
        return
    try:
        fs.fsync_dir(sp.layout.fd(State.PENDING))
    except BaseException:
        for name in waiting:  # their old names' fate is unknown: never rewritten, removed
            remove(sp, name)
        waiting.clear()
        raise
    assert sp.spare_files is not None  # (begin set both)
    sp.spare_files += waiting
    waiting.clear()


def claims_to_settle(sp: Handle) -> bool:
    """Whether claims' old copies wait for pending/'s fsync (a worker's next chore)."""
    return bool(sp.after_pending)


def take_file(sp: Handle) -> str | None:
    """A settled spare job file's name in tmp/, now the caller's to rewrite or remove; None: none."""
    return sp.spare_files.pop() if sp.spare_files else None


def release(sp: Handle) -> None:
    """Remove every spare this handle keeps and go on keeping new ones: a worker with nothing to
    do for a whole poll, so that tmp/ is empty while the spool is at rest (``ls tmp/`` shows only
    what is being written, and ``spool fsck`` lists no worker's spares as in progress)."""
    kept: list[str] = []
    for names in (sp.spare_beats, sp.spare_files, sp.unsettled_files, sp.after_pending, sp.after_leased):
        if names:
            kept += names
            names.clear()
    for spare in kept:
        remove(sp, spare)


def drop_all(sp: Handle) -> None:
    """Remove every spare this handle keeps (a worker stopping) and keep no more."""
    release(sp)
    sp.spare_beats = sp.spare_files = sp.unsettled_files = sp.after_pending = sp.after_leased = None
