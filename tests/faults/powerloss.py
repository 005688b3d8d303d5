"""The power-loss model: which states can a power cut leave, and does recovery keep every promise in each?

How it works, in four steps:

1. **Record.** A scenario runs against a real spool with ``spool.disk.fsio.fs`` swapped for a
   ``RecordingFS``: the real filesystem, with every mutating call logged (directory relative to
   the spool root, names, the bytes written, whether the file was fsync'd) beside the
   directory fsyncs. The scenario notes each *acknowledgement* (``ack``) at the point the call
   returned: a submit's id, a claim's counted try, a result, a move to dead, a queue's limits.
2. **Build crash states.** A power cut after operation k keeps operations 0..k-1, but only what
   was made durable is certain:
     - a file's DATA is durable once fsync'd (``write_new(sync=True)``, or ``fsync_file`` of it
       later); unsynced data whose name survives may come back empty or torn (its first half);
     - a NAME (create, link, rename, unlink in a directory) is durable once that directory is
       fsync'd after it. A rename between two directories has two halves: the source's removal
       is durable after an fsync of the source, the target's entry after an fsync of the target;
     - what is not durable may be lost in any subset, not only as a suffix. We bound it: every
       cut point k with nothing lost (the prefix states), plus every choice of at most
       ``max_drops`` (3) lost units before k.
   A rename neither of whose halves was fsync'd is lost whole, or loses only its source half
   (the name then exists in both folders, the state the link+unlink fallback leaves). Losing
   only its target half (the file vanishes from both folders) is generated only when the
   source half was made durable first, or with ``strict_renames=True``: journalling
   filesystems commit a rename as one transaction, and a move into done/ or dead/ fsyncs its
   target folder before it removes the source (``store.publish_job``).
   An exchange (``rename_exchange``) is two such halves, one per directory, lost together or
   apart as a rename's are. A REWRITE of a spare file in place (``rewrite_spare``) changes its
   inode's content under every name it has in the crash state; unsynced, it may come back as the
   old content or half rewritten. So a spare rewritten while an old name of it could still come
   back would show up as a job file with another job's content.
   A ``syncfs`` (a batch's one sync) makes everything issued before it durable once it returns:
   every file's data and every name in every directory; it says nothing about what follows it.
   Dot-files the runner writes without fsync by design (heartbeat counters, ``.wake``) are kept
   as written: losing them is not a durability question.
3. **Replay.** Many choices give the same files; each distinct state (names, contents, hard
   links; leftovers alone in tmp/ don't count, see ``signature``) is checked once, with the
   most acknowledgements any cut giving it had. It is written onto a fresh real folder: the
   spool as it was before the recorded run, with the surviving operations applied (hard links
   kept as hard links, so a file left under two names has two links). Staging names in tmp/
   are given a pid that cannot be alive: the process that wrote them died in the power cut.
4. **Recover and check.** ``fsck --repair`` in-process, one coordinator pass, then: every
   acknowledged submit is a job (one folder, same id and key and task); every acknowledged
   result is whole and its job done; a counted try is still counted; an acknowledged move to
   dead is still dead; no job in two folders; fsck is clean after the repair; the scenario's
   own bound on the number of jobs holds (a drop is ingested exactly once); an acknowledged
   ``set_limits`` is in its queues/ file and in force, and a queue with a concurrency has its
   ledger's 'leased' rows exactly at its jobs in leased/ (no slot leaked, none unaccounted).

Everything runs over a real filesystem (the recording under the caller's folder, the replays on
/dev/shm when there is one); nothing is mocked.
"""

from __future__ import annotations

import itertools
import logging
import os
import shutil
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spool.disk.fsio import RealFS
from support import behind_the_seam as installed  # the name this module and its tests use

# Above the largest pid_max Linux allows (2**22), so ``writer_alive`` says "gone".
DEAD_PID = 4_200_000 + 17
MAX_DROPS = 3

# -- 1. recording ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Op:
    """One mutating filesystem call, with directories relative to the spool root ("" is the root)."""

    # create | overwrite | rewrite | link | rename | exchange | unlink | fsync_dir | fsync_file | syncfs | mkdir
    kind: str
    dir: str
    name: str = ""
    dst_dir: str = ""
    dst: str = ""
    data: bytes = b""
    synced: bool = False  # create: the file's data was fsync'd before the call returned
    replace: bool = False  # rename: rename_replace (may replace dst)

    def describe(self) -> str:
        if self.kind in ("link", "rename"):
            verb = "rename_replace" if self.replace else ("rename" if self.kind == "rename" else "link")
            return f"{verb} {_show(self.dir, self.name)} -> {_show(self.dst_dir, self.dst)}"
        if self.kind == "exchange":
            return f"exchange {_show(self.dir, self.name)} <-> {_show(self.dst_dir, self.dst)}"
        if self.kind == "rewrite":
            return f"rewrite {_show(self.dir, self.name)} ({len(self.data)} bytes{', fsync' if self.synced else ''})"
        if self.kind == "create":
            return f"create {_show(self.dir, self.name)} ({len(self.data)} bytes{', fsync' if self.synced else ''})"
        if self.kind == "fsync_dir":
            return f"fsync {self.dir or '.'}/"
        if self.kind == "syncfs":
            return "syncfs (everything so far)"
        if self.kind == "fsync_file":
            return f"fsync {_show(self.dir, self.name)}"
        return f"{self.kind} {_show(self.dir, self.name)}"


@dataclass(frozen=True)
class Ack:
    """What a caller was told, and after how many recorded operations it was told."""

    at: int
    kind: str  # submit | claim | complete | fail | ingest | schedule | queue
    info: dict[str, Any]


class RecordingFS(RealFS):
    """The real filesystem, logging every mutation under ``root`` so it can be replayed."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        super().__init__()
        self.root = os.path.realpath(root)
        self.ops: list[Op] = []
        self.acks: list[Ack] = []

    def ack(self, kind: str, **info: Any) -> None:
        self.acks.append(Ack(len(self.ops), kind, info))

    def rewrites(self) -> int:
        """How many spare files were rewritten so far (a scenario's check that it wrote over any)."""
        return sum(op.kind == "rewrite" for op in self.ops)

    def rel(self, dir_fd: int | None) -> str | None:
        """The directory's path relative to the spool root, or None if it is outside."""
        if dir_fd is None:
            return None
        path = os.readlink(f"/proc/self/fd/{dir_fd}")
        rel = os.path.relpath(path, self.root)
        if rel == ".":
            return ""
        return None if rel.startswith("..") else rel

    def _log(self, op: Op | None) -> None:
        if op is not None:
            self.ops.append(op)

    def make_dir(self, name: str, mode: int, dir_fd: int | None = None) -> None:
        super().make_dir(name, mode, dir_fd=dir_fd)
        where = self.rel(dir_fd)
        self._log(None if where is None else Op("mkdir", where, name))

    def fsync_dir(self, dir_fd: int) -> None:
        super().fsync_dir(dir_fd)
        where = self.rel(dir_fd)
        self._log(None if where is None else Op("fsync_dir", where))

    def syncfs(self, dir_fd: int) -> bool:
        synced = super().syncfs(dir_fd)
        if synced and self.rel(dir_fd) is not None:
            self._log(Op("syncfs", ""))
        return synced

    def fsync_file(self, dir_fd: int, name: str) -> None:
        super().fsync_file(dir_fd, name)
        where = self.rel(dir_fd)
        self._log(None if where is None else Op("fsync_file", where, name))

    def write_new(self, dir_fd: int, name: str, data: bytes, *, sync: bool, mode: int | None = None) -> None:
        super().write_new(dir_fd, name, data, sync=sync, mode=mode)
        where = self.rel(dir_fd)
        self._log(None if where is None else Op("create", where, name, data=bytes(data), synced=sync))

    def overwrite_small(self, dir_fd: int, name: str, data: bytes) -> None:
        super().overwrite_small(dir_fd, name, data)
        where = self.rel(dir_fd)
        self._log(None if where is None else Op("overwrite", where, name, data=bytes(data)))

    def rewrite_spare(self, dir_fd: int, name: str, data: bytes, *, sync: bool) -> bool:
        rewritten = super().rewrite_spare(dir_fd, name, data, sync=sync)
        where = self.rel(dir_fd)
        if rewritten and where is not None:
            self._log(Op("rewrite", where, name, data=bytes(data), synced=sync))
        return rewritten

    def touch(self, dir_fd: int, name: str) -> None:
        super().touch(dir_fd, name)  # a wake-up hint: an empty file, as an overwrite with nothing
        where = self.rel(dir_fd)
        self._log(None if where is None else Op("overwrite", where, name, data=b""))

    def rename_noreplace(self, src_fd: int, src: str, dst_fd: int, dst: str) -> None:
        super().rename_noreplace(src_fd, src, dst_fd, dst)
        self._log_pair("rename", src_fd, src, dst_fd, dst, replace=False)

    def rename_replace(self, src_fd: int, src: str, dst_fd: int, dst: str) -> None:
        super().rename_replace(src_fd, src, dst_fd, dst)
        self._log_pair("rename", src_fd, src, dst_fd, dst, replace=True)

    def rename_exchange(self, src_fd: int, src: str, dst_fd: int, dst: str) -> bool:
        exchanged = super().rename_exchange(src_fd, src, dst_fd, dst)
        if exchanged:
            self._log_pair("exchange", src_fd, src, dst_fd, dst, replace=False)
        return exchanged

    def link(self, src_fd: int, src: str, dst_fd: int, dst: str) -> None:
        super().link(src_fd, src, dst_fd, dst)
        self._log_pair("link", src_fd, src, dst_fd, dst, replace=False)

    def unlink(self, dir_fd: int, name: str, *, missing_ok: bool = False) -> None:
        super().unlink(dir_fd, name, missing_ok=missing_ok)
        where = self.rel(dir_fd)
        self._log(None if where is None else Op("unlink", where, name))  # a missing name replays as nothing

    def _log_pair(self, kind: str, src_fd: int, src: str, dst_fd: int, dst: str, *, replace: bool) -> None:
        source, target = self.rel(src_fd), self.rel(dst_fd)
        if source is None and target is None:
            return
        if source is None or target is None:
            raise AssertionError(f"{kind} across the spool's boundary: {src} -> {dst}")
        self._log(Op(kind, source, src, dst_dir=target, dst=dst, replace=replace))


# -- the spool before the run ---------------------------------------------------------------------


@dataclass
class Snapshot:
    """The spool's files before the recorded run, by directory, with hard links kept."""

    dirs: list[str]
    names: dict[str, dict[str, int]]  # dir -> name -> inode number (ours)
    contents: dict[int, bytes]

    @classmethod
    def take(cls, root: Path) -> Snapshot:
        dirs: list[str] = []
        names: dict[str, dict[str, int]] = {}
        contents: dict[int, bytes] = {}
        by_ino: dict[tuple[int, int], int] = {}
        for path, subdirs, files in os.walk(root):
            subdirs.sort()
            rel = os.path.relpath(path, root)
            rel = "" if rel == "." else rel
            dirs.append(rel)
            names[rel] = {}
            for name in sorted(files):
                info = os.lstat(os.path.join(path, name))
                if not os.path.isfile(os.path.join(path, name)) or os.path.islink(os.path.join(path, name)):
                    raise AssertionError(f"{rel}/{name}: the model copies regular files only")
                ident = (info.st_dev, info.st_ino)
                if ident not in by_ino:
                    by_ino[ident] = len(by_ino)
                    contents[by_ino[ident]] = Path(path, name).read_bytes()
                names[rel][name] = by_ino[ident]
        return cls(dirs, names, contents)


# -- 2. crash states ------------------------------------------------------------------------------


@dataclass(frozen=True)
class NameEffect:
    """One directory entry added (``inode`` set) or removed (``inode`` None) by operation ``op``."""

    op: int
    dir: str
    name: str
    inode: int | None


@dataclass(frozen=True)
class Unit:
    """What one power cut may lose as a piece: some name effects, or one file's unsynced data."""

    label: str
    effects: frozenset[int] = frozenset()
    lost_data: tuple[int, str] | None = None  # (inode, "empty" | "torn")


@dataclass(frozen=True)
class CrashState:
    cut: int  # operations [0, cut) were issued before the power went
    lost: tuple[Unit, ...]  # what of them did not survive

    def describe(self, ops: Sequence[Op]) -> str:
        last = ops[self.cut - 1].describe() if self.cut else "(before the first operation)"
        lost = "; ".join(unit.label for unit in self.lost) or "nothing"
        return f"power cut after op {self.cut} [{last}], lost: {lost}"


class History:
    """A recorded run turned into name effects and data writes, and the crash states they allow."""

    def __init__(self, snapshot: Snapshot, ops: Sequence[Op], *, strict_renames: bool = False) -> None:
        self.snapshot = snapshot
        self.ops = list(ops)
        self.strict_renames = strict_renames
        self.effects: list[NameEffect] = []
        self.effects_of: list[list[int]] = []  # op index -> indices into effects
        self.data: dict[int, tuple[int, bytes, bool]] = {}  # inode -> (op, content, synced)
        self.rewrites: dict[int, list[tuple[int, bytes, bool]]] = {}  # inode -> in-place rewrites, in order
        self.data_synced: dict[int, list[int]] = {}  # inode -> the ops that fsync'd its data later
        self._simulate()

    def _simulate(self) -> None:
        names = {d: dict(entries) for d, entries in self.snapshot.names.items()}
        next_inode = max(self.snapshot.contents, default=-1) + 1
        for index, op in enumerate(self.ops):
            mine: list[int] = []

            # add() is called only in this iteration, so its late-bound ``mine`` and ``index`` are this op's.
            def add(directory: str, name: str, inode: int | None) -> None:
                mine.append(len(self.effects))  # noqa: B023
                self.effects.append(NameEffect(index, directory, name, inode))  # noqa: B023
                if inode is None:
                    names[directory].pop(name, None)
                else:
                    names[directory][name] = inode

            folder = names.setdefault(op.dir, {})
            if op.kind in ("create", "overwrite"):
                if op.kind == "create" and op.name in folder:
                    raise AssertionError(f"op {index}: {op.describe()} over an existing name")
                self.data[next_inode] = (index, op.data, op.synced)
                add(op.dir, op.name, next_inode)
                next_inode += 1
            elif op.kind in ("link", "rename"):
                inode = folder.get(op.name)
                if inode is None:
                    raise AssertionError(f"op {index}: {op.describe()}: the model lost track of the source")
                names.setdefault(op.dst_dir, {})
                if op.kind == "rename":
                    add(op.dir, op.name, None)
                add(op.dst_dir, op.dst, inode)
            elif op.kind == "exchange":
                mine_inode, other = folder.get(op.name), names.setdefault(op.dst_dir, {}).get(op.dst)
                if mine_inode is None or other is None:
                    raise AssertionError(f"op {index}: {op.describe()}: the model lost track of a name")
                add(op.dir, op.name, other)
                add(op.dst_dir, op.dst, mine_inode)
            elif op.kind == "rewrite":
                inode = folder.get(op.name)
                if inode is None:
                    raise AssertionError(f"op {index}: {op.describe()}: the model lost track of the file")
                self.rewrites.setdefault(inode, []).append((index, op.data, op.synced))
            elif op.kind == "unlink":
                if op.name in folder:
                    add(op.dir, op.name, None)
            elif op.kind == "fsync_file":
                inode = folder.get(op.name)
                if inode is None:
                    raise AssertionError(f"op {index}: {op.describe()}: the model lost track of the file")
                self.data_synced.setdefault(inode, []).append(index)
            elif op.kind == "mkdir":
                raise AssertionError(f"op {index}: {op.describe()}: start the recording after the layout exists")
            self.effects_of.append(mine)

    def durable(self, effect: NameEffect, cut: int) -> bool:
        return any(
            (op.kind == "fsync_dir" and op.dir == effect.dir) or op.kind == "syncfs"
            for op in self.ops[effect.op + 1 : cut]
        )

    def data_durable(self, inode: int, cut: int, written: int | None = None) -> bool:
        """The file's content written by op ``written`` (default: its creation) was fsync'd after
        it (by name, or by a syncfs) before ``cut``."""
        written = self.data[inode][0] if written is None else written
        return any(written < at < cut for at in self.data_synced.get(inode, ())) or any(
            op.kind == "syncfs" for op in self.ops[written + 1 : cut]
        )

    def units(self, cut: int) -> list[Unit]:
        """The pieces a power cut after ``cut`` operations may lose."""
        units: list[Unit] = []
        for index, op in enumerate(self.ops[:cut]):
            if op.kind == "overwrite" or (op.name.startswith(".") and op.kind in ("create", "unlink")):
                continue  # the runner's own unsynced dot-files (see the module doc)
            ids = self.effects_of[index]
            what = op.describe()
            if op.kind in ("rename", "exchange") and op.dir != op.dst_dir:
                source, target = ids
                source_durable = self.durable(self.effects[source], cut)
                target_durable = self.durable(self.effects[target], cut)
                if not source_durable and not target_durable:
                    units.append(Unit(f"[{what}]", frozenset(ids)))
                if not source_durable:
                    units.append(Unit(f"[{what}] in {op.dir}/ only (both names remain)", frozenset([source])))
                if not target_durable and (source_durable or self.strict_renames):
                    units.append(Unit(f"[{what}] in {op.dst_dir}/ only (the file vanishes)", frozenset([target])))
            elif ids and not all(self.durable(self.effects[i], cut) for i in ids):
                units.append(Unit(f"[{what}]", frozenset(ids)))
            if op.kind == "create" and not op.synced and op.data:
                inode = self.effects[ids[0]].inode
                assert inode is not None
                if self.data_durable(inode, cut):
                    continue
                units.append(Unit(f"data of [{what}] (now empty)", lost_data=(inode, "empty")))
                if len(op.data) > 1:
                    units.append(Unit(f"data of [{what}] (torn to its first half)", lost_data=(inode, "torn")))
            if op.kind == "rewrite" and not op.synced:
                inode = self._rewritten(index)
                if not self.data_durable(inode, cut, written=index):
                    units.append(Unit(f"data of [{what}] (its old content)", lost_data=(inode, f"old@{index}")))
                    units.append(Unit(f"data of [{what}] (half rewritten)", lost_data=(inode, f"torn@{index}")))
        return units

    def _rewritten(self, index: int) -> int:
        """The inode op ``index`` (a rewrite) wrote over."""
        return next(inode for inode, writes in self.rewrites.items() if any(at == index for at, _d, _s in writes))

    def content(self, inode: int, cut: int, how: str | None) -> bytes:
        """The inode's content after a power cut after ``cut`` ops, ``how`` its data lost (if so)."""
        if inode in self.data:
            content = self.data[inode][1]
            content = b"" if how == "empty" else content[: len(content) // 2] if how == "torn" else content
        else:
            content = self.snapshot.contents[inode]
        for at, data, _synced in self.rewrites.get(inode, ()):
            if at >= cut or how == f"old@{at}":
                continue
            content = data[: len(data) // 2] + content[len(data) // 2 :] if how == f"torn@{at}" else data
        return content

    def states(self, max_drops: int = MAX_DROPS) -> Iterator[CrashState]:
        """Every prefix cut, and every cut with at most ``max_drops`` units lost."""
        for cut in range(len(self.ops) + 1):
            units = self.units(cut)
            for count in range(max_drops + 1):
                for lost in itertools.combinations(units, count):
                    inodes = [unit.lost_data[0] for unit in lost if unit.lost_data]
                    if len(inodes) != len(set(inodes)):
                        continue  # one file's data is lost one way at a time
                    yield CrashState(cut, lost)

    def files(self, state: CrashState) -> dict[tuple[str, str], tuple[int, bytes]]:
        """(dir, name) -> (inode, content) after the power cut ``state``."""
        dropped = set().union(*(unit.effects for unit in state.lost)) if state.lost else set()
        lost_data = dict(unit.lost_data for unit in state.lost if unit.lost_data)
        names = {d: dict(entries) for d, entries in self.snapshot.names.items()}
        for index, effect in enumerate(self.effects):
            if effect.op >= state.cut or index in dropped:
                continue
            folder = names.setdefault(effect.dir, {})
            if effect.inode is None:
                folder.pop(effect.name, None)
            else:
                folder[effect.name] = effect.inode
        files = {}
        for directory, entries in names.items():
            for name, inode in entries.items():
                files[(directory, name)] = (inode, self.content(inode, state.cut, lost_data.get(inode)))
        return files


def signature(files: dict[tuple[str, str], tuple[int, bytes]]) -> tuple[Any, ...]:
    """Two crash states with the same names, contents and hard links are the same state.

    A file in tmp/ with no other name is left out: tmp/ is staging that is never read,
    and the sweep removes whatever a dead writer left there, so such leftovers cannot change
    what recovery does. A tmp/ name that is a second link of a job or result does count (it
    makes that file's link count 2).
    """
    groups: dict[int, list[tuple[str, str]]] = {}
    for place, (inode, _content) in files.items():
        groups.setdefault(inode, []).append(place)
    links = sorted(tuple(sorted(places)) for places in groups.values() if len(places) > 1)
    named = [(d, n, c) for (d, n), (i, c) in files.items() if d != "tmp" or len(groups[i]) > 1]
    return tuple(sorted(named)), tuple(links)


# -- 3. replay ------------------------------------------------------------------------------------


def materialize(snapshot: Snapshot, files: dict[tuple[str, str], tuple[int, bytes]], dest: Path) -> None:
    """Write one crash state onto a fresh real folder."""
    for directory in snapshot.dirs:
        (dest / directory).mkdir(mode=0o700, exist_ok=directory == "")
    os.chmod(dest, 0o700)
    first: dict[int, Path] = {}
    for (directory, name), (inode, content) in sorted(files.items()):
        if directory == "tmp" and name.split("-", 1)[0].isdigit():
            name = f"{DEAD_PID}-{name.split('-', 1)[1]}"  # its writer died in the power cut
        path = dest / directory / name
        if inode in first:
            os.link(first[inode], path)
            continue
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, content)
        finally:
            os.close(fd)
        first[inode] = path


# -- 4. recover and check -------------------------------------------------------------------------


_decoded: dict[bytes, Any] = {}


def recover_and_check(root: Path, acks: Sequence[Ack], jobs_bound: tuple[int, int] | None) -> list[str]:
    """Run recovery on the spool at ``root`` as a restart after the power cut would; list broken promises."""
    from spool import Spool
    from spool.fsck import fsck
    from spool.job import decode
    from spool.disk.layout import State, job_name, result_name
    from spool.moves.recovery import list_folders
    from spool.runner.coordinator import Coordinator

    problems: list[str] = []
    sp = Spool(root, environ={})
    try:
        repaired = fsck(sp, repair=True)
        problems += [f"fsck --repair left a violation: {v}" for v in repaired.violations]
        Coordinator(sp).run_pass()
        listing = list_folders(sp)
        for job_id, folders in listing.jobs.items():
            if len(folders) > 1:
                problems.append(f"{job_id}: in {len(folders)} folders after recovery")
        if listing.drops:
            problems.append(f"drops left in pending/ after a coordinator pass: {listing.drops}")
        if jobs_bound is not None and not jobs_bound[0] <= len(listing.jobs) <= jobs_bound[1]:
            problems.append(f"{len(listing.jobs)} jobs after recovery; expected {jobs_bound[0]}..{jobs_bound[1]}")

        def job(job_id: str) -> tuple[State, Any] | None:
            folders = listing.jobs.get(job_id)
            if not folders:
                return None
            try:
                data = (root / folders[0].value / job_name(job_id)).read_bytes()
                if data not in _decoded:  # the same bytes recur across states; YAML is slow
                    _decoded[data] = decode(data, source=job_id, expected_id=job_id, max_bytes=len(data) + 1)
                return folders[0], _decoded[data]
            except Exception as err:  # a torn file is a lost job: report it, don't stop checking
                problems.append(f"{job_id}: {folders[0].value}/ holds no whole job file ({err})")
                return None

        problems += _check_queues(sp, listing, [ack for ack in acks if ack.kind == "queue"], job)
        for ack in acks:
            if ack.kind == "queue":
                continue
            job_id = ack.info["id"]
            found = job(job_id)
            if found is None:
                problems.append(f"acknowledged {ack.kind} of {job_id} lost: the job is in no folder")
                continue
            state, job_file = found
            if ack.kind in ("submit", "ingest"):
                if job_file.job.key != ack.info["key"] or job_file.job.task != ack.info["task"]:
                    problems.append(
                        f"acknowledged {ack.kind} of {job_id}: key/task now "
                        f"{job_file.job.key!r}/{job_file.job.task!r}, was {ack.info['key']!r}/"
                        f"{ack.info['task']!r}"
                    )
            elif ack.kind == "claim":
                if job_file.attempt < ack.info["attempt"] or job_file.tries < ack.info["tries"]:
                    problems.append(
                        f"counted try of {job_id} lost: attempt {job_file.attempt}, tries "
                        f"{job_file.tries}; the claim had counted attempt {ack.info['attempt']}, "
                        f"tries {ack.info['tries']}"
                    )
            elif ack.kind == "complete":
                try:
                    result = (root / "results" / result_name(job_id)).read_bytes()
                except FileNotFoundError:
                    result = None
                if result != ack.info["result"]:
                    problems.append(f"acknowledged result of {job_id}: results/ holds {result!r}")
                if state is not State.DONE:
                    problems.append(f"acknowledged result of {job_id}: the job is {state.value}, not done")
            elif ack.kind == "schedule":
                from spool.schedule.fired import read_fired

                recorded = read_fired(sp, ack.info["name"]).slot
                if recorded is None or recorded < ack.info["slot"]:
                    problems.append(
                        f"acknowledged firing of schedule {ack.info['name']} lost: its record says "
                        f"{recorded}, the firing was of slot {ack.info['slot']}"
                    )
            elif ack.kind == "fail" and ack.info["state"] == "dead":
                if state is not State.DEAD or job_file.reason != "failed":
                    problems.append(
                        f"acknowledged move of {job_id} to dead lost: {state.value}, reason {job_file.reason!r}"
                    )
    except Exception as err:  # recovery itself must survive every crash state
        frames = traceback.extract_tb(err.__traceback__)
        spool_frames = [f for f in frames if "/spool/" in f.filename or "/runner/" in f.filename] or frames
        where = " <- ".join(f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in reversed(spool_frames[-4:]))
        problems.append(f"recovery raised {type(err).__name__}: {err} (at {where})")
    finally:
        sp.close()
    return problems


def _check_queues(sp: Any, listing: Any, acks: Sequence[Ack], job: Callable[[str], Any]) -> list[str]:
    """A queue's limits after recovery: an acknowledged ``set_limits`` (``spool queue set``) is in
    its queues/ file, whole, and in force in the ledger after the coordinator's pass (its sync);
    and for every queue with a concurrency in force, the ledger's 'leased' rows of the queue are
    exactly its jobs in leased/ (a row left 'leased' is a slot no claim gets back; a job in
    leased/ whose row is not is one a claim can exceed the cap by)."""
    from spool.disk.layout import State
    from spool.queues import limits_in_force, read_files

    problems: list[str] = []
    files = read_files(sp)
    for ack in acks:
        name, limits = ack.info["name"], ack.info["limits"]
        found = files.get(name)
        if found is None or found.limits != limits:
            held = "no file" if found is None else (found.error or found.limits)
            problems.append(f"acknowledged limits of queue {name} ({limits}) lost: queues/{name}.yaml holds {held}")
        elif limits_in_force(sp, name) != limits:
            problems.append(f"queue {name}: the ledger holds {limits_in_force(sp, name)}, its file {limits}")
    capped = {name for name, queue_file in files.items() if queue_file.limits and queue_file.limits.concurrency}
    if capped:
        rows = sp.ledger.states()
        queue_of = {job_id: found[1].job.queue for job_id in listing.jobs if (found := job(job_id)) is not None}
        for name in sorted(capped):
            leased_rows = sorted(i for i, state in rows.items() if state == "leased" and queue_of.get(i) == name)
            leased_files = sorted(
                i for i, folders in listing.jobs.items() if State.LEASED in folders and queue_of.get(i) == name
            )
            if leased_rows != leased_files:
                problems.append(f"queue {name}: ledger rows leased {leased_rows}, jobs in leased/ {leased_files}")
    return problems


# -- running a scenario ---------------------------------------------------------------------------


@dataclass
class Scenario:
    """Something a spool's users do, with what they were told noted by ``rec.ack``."""

    name: str
    act: Callable[[Any, RecordingFS], None]  # (Spool, recorder)
    prepare: Callable[[Path], None] | None = None  # writes into the spool before the run
    jobs_bound: tuple[int, int] | None = None  # how many jobs every recovered state must hold


@dataclass
class Violation:
    state: str
    problems: list[str]
    kept: Path | None = None


@dataclass
class ModelRun:
    scenario: str
    ops: list[Op]
    acks: list[Ack]
    generated: int = 0  # crash states built (before removing duplicates)
    checked: int = 0  # distinct states replayed, recovered and checked
    with_losses: int = 0  # of those, states where something unsynced was lost (not a plain prefix)
    seconds: float = 0.0
    violations: list[Violation] = field(default_factory=list)

    def summary(self) -> str:
        return (
            f"{self.scenario}: {len(self.ops)} ops, {self.generated} crash states built, {self.checked} distinct "
            f"checked ({self.with_losses} with unsynced losses), {len(self.violations)} violating, "
            f"{self.seconds:.1f}s"
        )


def record(
    scenario: Scenario, workdir: Path, fs_class: type[RecordingFS] = RecordingFS
) -> tuple[Snapshot, RecordingFS]:
    """Run the scenario once on a fresh spool, recording; return the spool before it, and the log."""
    from spool import Spool

    root = workdir / "recorded"
    Spool.init(root, environ={}).close()
    if scenario.prepare is not None:
        scenario.prepare(root)
    snapshot = Snapshot.take(root)
    recorder = fs_class(root)
    sp = Spool(root, environ={})
    try:
        with installed(recorder):
            scenario.act(sp, recorder)
    finally:
        sp.close()
    return snapshot, recorder


def run_model(
    scenario: Scenario,
    workdir: Path,
    *,
    fs_class: type[RecordingFS] = RecordingFS,
    max_drops: int = MAX_DROPS,
    strict_renames: bool = False,
    stop_after: int | None = None,
    keep_failed: bool = False,
) -> ModelRun:
    """Record the scenario, then replay, recover and check every distinct crash state it allows.

    ``stop_after``: stop once that many violating states were found (a bite test needs one).
    ``keep_failed``: leave each violating state's folder (after recovery) for a look.
    The run is recorded under ``workdir``; the states are replayed in a scratch folder on
    /dev/shm when there is one (a real filesystem whose fsync and rmdir cost nothing, so
    hundreds of states fit in seconds), else under ``workdir``.
    """
    started = time.monotonic()
    snapshot, recorder = record(scenario, workdir, fs_class)
    history = History(snapshot, recorder.ops, strict_renames=strict_renames)
    run = ModelRun(scenario.name, recorder.ops, recorder.acks)
    # One check per distinct on-disk state, with the most acknowledgements any cut giving it had.
    distinct: dict[tuple[Any, ...], tuple[CrashState, dict[tuple[str, str], tuple[int, bytes]]]] = {}
    for state in history.states(max_drops):
        run.generated += 1
        files = history.files(state)
        key = signature(files)
        seen = distinct.get(key)
        if seen is None or _acked(recorder.acks, state.cut) > _acked(recorder.acks, seen[0].cut):
            distinct[key] = (state, files)
    quiet = logging.getLogger("spool")
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)  # recovery warns about every crash it finishes; that is its job
    scratch = _scratch(workdir)
    try:
        for number, (state, files) in enumerate(distinct.values()):
            dest = scratch / f"state-{number}"
            materialize(snapshot, files, dest)
            acks = [ack for ack in recorder.acks if ack.at <= state.cut]
            problems = recover_and_check(dest, acks, scenario.jobs_bound)
            if not (problems and keep_failed):
                shutil.rmtree(dest)
            run.checked += 1
            run.with_losses += bool(state.lost)
            if problems:
                run.violations.append(Violation(state.describe(recorder.ops), problems, dest if keep_failed else None))
                if stop_after is not None and len(run.violations) >= stop_after:
                    break
    finally:
        quiet.setLevel(level)
        if not keep_failed and scratch != workdir:
            shutil.rmtree(scratch, ignore_errors=True)
    run.seconds = time.monotonic() - started
    return run


def _scratch(workdir: Path) -> Path:
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):
        return Path(tempfile.mkdtemp(prefix="spool-powerloss-", dir=shm))
    return workdir


def _acked(acks: Sequence[Ack], cut: int) -> int:
    return sum(ack.at <= cut for ack in acks)


def _show(directory: str, name: str) -> str:
    return f"{directory}/{name}" if directory else name
