"""The spool on disk: every folder and every name in it, and the only code that builds or parses one.

Every other module asks this one for a name (``job_name(id)``, ``heartbeat_name(id, attempt)``)
or for what a name means (``job_id_of(name)``, ``parse_heartbeat_name(name)``); none spells a
suffix or a prefix itself. Who writes each entry and who reads it:

    name                                 written by                         read by
    -----------------------------------  ---------------------------------  ---------------------------------
    .spool                               rootdir.init_spool, last and       Layout(): a folder without it is
                                         fsync'd: "spool_format: 1"         not a spool; ``spool init``
    config.yaml                          a person (optional)                settings.load_settings
    ledger.sqlite3, -wal, -shm           ledger_file.create (under          every process (the index; rebuilt
                                         locks/ledger.lock), then SQLite    from the files when unusable)
    ledger.sqlite3.corrupt-<time>[.<n>]  ledger_file.set_aside (fsck        a person; nothing else
      [-wal|-shm]                        --repair, the coordinator)
    pending/<id>.yaml                    submit, a retry, release, requeue, claim (worker), the coordinator
                                         make_ready, the ingest of a drop
    pending/<any other name>             a person: a drop                   the coordinator: ingest
    pending/*.tmp                        a person's write in progress       nobody (never a job)
    waiting/<id>.yaml                    submit or ingest (depends_on)      the coordinator: promote, skip
    {pending,waiting}/.<id>.drop         ingest, before its rename: the     recovery (finish_ingest,
                                         dropped file's name                has_ingest_evidence); fsck --repair
    {state}/.<id>.invalid-folder         ingest of a dropped folder:        nobody (hidden for good)
                                         hidden, never ingested again
    {state}/.wake                        store.wake, after a ledger commit  the coordinator's and workers'
                                                                            inotify watch
    leased/<id>.yaml                     claim (the lease is in the file)   the worker, the coordinator
    leased/.<id>.<attempt>.hb            the claim (counter 0, before its   the coordinator (counter changes
                                         rename), then the worker's beats:  on its clock; the worker's lock),
                                         "<counter> <worker>\n", then the   readers of progress (status,
                                         handler's progress as one JSON     wait, the API)
                                         line when it reported any; no fsync
    leased/.<id>.cancel                  ``spool cancel`` of a leased job   the worker (lease_status), expire
    {state}/<name>.planted-<hex>         store.set_aside: a planted entry   nobody
                                         moved out of the runner's names
    done/<id>.yaml                       finish_done (complete, settle)     everyone; results/<id>.json exists
    dead/<id>.yaml                       bury, expire, cancel, an invalid   everyone; ``reason:`` says why
                                         drop's record
    results/<id>.json                    complete: link(2), never replaced  Spool.result, ``spool result``
    schedules/<name>.yaml                a person, ``spool schedule add``,  the coordinator (fires it),
                                         enable/disable (tmp, rename)       ``spool schedule list``
    schedules/.<name>.fired, .firing     the coordinator, around a firing   the coordinator, ``schedule list``
                                         (tmp, rename): spool.schedule.fired       (the last slot fired, or begun)
    queues/<name>.yaml                   a person, ``spool queue set``      spool.queues.sync -> the ledger
    keys/<sha256(key)>                   submit or ingest of a keyed job:   submit (the key is taken), fsck
                                         the job's id
    locks/<id>.lock                      every move (flock); gone at purge  fsck (is a move in flight?)
    locks/key-<sha256(key)>.lock         a keyed submit or ingest, fsck     fsck
    locks/worker-<name>.lock             a worker, held while it lives;     the coordinator (dead worker?),
                                         holds its advertisement (JSON)     stats, spool.workers
    locks/coordinator.lock               the coordinator, while it runs     stats, fsck, a second coordinator
    locks/ledger.lock                    ledger_file (create, set aside)    ledger_file
    locks/ledger-writes.lock             every ledger write, for its turn   the same (spool.ledger.turns)
    locks/tls.lock                       spool.tokens (each rewrite), the   the same
                                         self-signed pair's making
    logs/<id>.<attempt>.log              the worker (the attempt's          ``spool logs``; purge removes them
                                         stdout and stderr, capped), made
                                         at the attempt's first output
    tls/tokens.yaml                      ``spool token add``/``revoke``,     the server (spool.tokens), at each
                                         a request's last-used mark (tmp,   request when the file changed;
                                         fsync, rename; 0600): hashes only  ``spool token list``
    tls/cert.pem, tls/key.pem            ``spool serve --self-signed`` on   ``spool serve``
                                         first use (key 0600)
    tls/sessions.sqlite3                 every ``spool serve``: logins      every ``spool serve`` (a cache)
    tmp/<pid>-<random>.tmp               every atomic write, staged; a      the tmp sweep (fsck): swept once
                                         worker's spare heartbeat files     the writer pid is gone; the worker's
                                         (spool.moves.spares)               next claims take its spares
    tmp/<pid>-purge-<id>.tmp             purge: the job file it removes     the tmp sweep finishes that purge

A job's state is the folder its file is in. If a crash ever leaves one job in two folders, the
more advanced copy wins: done > dead > leased > pending > waiting (``ADVANCEMENT``). Names
starting with ``.`` are the runner's own and never jobs; in pending/, only a name ``new_id``
could have made is a job (any other is a drop).
"""

from __future__ import annotations

import enum
import errno
import os
import re
import time
from pathlib import Path

from spool.base.errors import NotASpool, SpoolError
from spool.disk.fsio import fs
from spool.disk.marker import FORMAT as FORMAT, MARKER as MARKER, check_marker  # re-exported: the surface

CONFIG_NAME, LEDGER_NAME = "config.yaml", "ledger.sqlite3"
JOB_SUFFIX, WAKE_NAME = ".yaml", ".wake"

_RESULT_SUFFIX = ".json"
_LEDGER_SIDE_FILES = ("-wal", "-shm")  # SQLite finds them by name beside the ledger
_LOCK_SUFFIX, _WORKER_LOCK_PREFIX = ".lock", "worker-"
_HEARTBEAT_SUFFIX, _DROP_NOTE_SUFFIX = ".hb", ".drop"
_SET_ASIDE = ".planted-"
_PURGE_MARKER = re.compile(r"[0-9]+-purge-([A-Za-z0-9][A-Za-z0-9_-]{0,63})\.tmp")


class State(str, enum.Enum):
    PENDING = "pending"
    WAITING = "waiting"
    LEASED = "leased"
    DONE = "done"
    DEAD = "dead"

    @property
    def terminal(self) -> bool:
        return self in (State.DONE, State.DEAD)


# Higher wins when one job is found in two folders.
ADVANCEMENT = {State.WAITING: 0, State.PENDING: 1, State.LEASED: 2, State.DEAD: 3, State.DONE: 4}
OTHER_FOLDERS = ("results", "schedules", "queues", "keys", "locks", "logs", "tls", "tmp")
FOLDERS = tuple(s.value for s in State) + OTHER_FOLDERS


# -- job files and results ---------------------------------------------------------------------


def job_name(job_id: str) -> str:
    return job_id + JOB_SUFFIX


def job_id_of(name: str) -> str:
    """The id part of ``<id>.yaml``; '' for any other name. Whether it is an id (and, in
    pending/, one ``new_id`` could have made) is the caller's check (``spool.disk.ids``)."""
    return name[: -len(JOB_SUFFIX)] if name.endswith(JOB_SUFFIX) else ""


def result_name(job_id: str) -> str:
    return job_id + _RESULT_SUFFIX


def result_id_of(name: str) -> str:
    """The id part of ``<id>.json`` in results/; '' for any other name."""
    return name[: -len(_RESULT_SUFFIX)] if name.endswith(_RESULT_SUFFIX) else ""


def key_name(key: str) -> str:
    """User keys never become file names as they are: they are hashed."""
    import hashlib  # start-up: OpenSSL's hashes load only when a key is named (~3 ms of every submit)

    return hashlib.sha256(key.encode("utf-8")).hexdigest()


# -- the runner's dot-files beside the jobs ----------------------------------------------------


def is_dot_name(name: str) -> bool:
    """The runner's own names in a state folder start with a dot: never a job, never a drop."""
    return name.startswith(".")


def is_ignored_name(name: str) -> bool:
    """Names the runner never reads as jobs: its own dot-files and in-progress user writes."""
    return is_dot_name(name) or name.endswith(".tmp")


def heartbeat_name(job_id: str, attempt: int) -> str:
    return f".{job_id}.{attempt}{_HEARTBEAT_SUFFIX}"


def _is_decimal(text: str) -> bool:
    """ASCII digits only: ``'²'.isdigit()`` is true but ``int('²')`` raises, and a planted name
    must never raise inside a coordinator's pass."""
    return text.isascii() and text.isdigit()


def parse_heartbeat_name(name: str) -> tuple[str, int] | None:
    """(job id, attempt) of ``.<id>.<attempt>.hb``; None for any other name."""
    if not (name.startswith(".") and name.endswith(_HEARTBEAT_SUFFIX)):
        return None
    job_id, _, attempt = name[1 : -len(_HEARTBEAT_SUFFIX)].rpartition(".")
    return (job_id, int(attempt)) if _is_decimal(attempt) else None


def cancel_name(job_id: str) -> str:
    return f".{job_id}.cancel"


def is_lease_file_of(name: str, job_id: str) -> bool:
    """One of the job's dot-files in leased/ (a heartbeat of any attempt, a cancel request),
    not counting an entry set aside under such a name."""
    return name.startswith(f".{job_id}.") and _SET_ASIDE not in name


def drop_note_name(job_id: str) -> str:
    """``.<id>.drop`` beside an ingest in flight: the dropped file's name (a dot-file, never a job)."""
    return f".{job_id}{_DROP_NOTE_SUFFIX}"


def parse_drop_note_name(name: str) -> str | None:
    """The job id a ``.<id>.drop`` note is for; None for any other name."""
    if name.startswith(".") and name.endswith(_DROP_NOTE_SUFFIX):
        return name[1 : -len(_DROP_NOTE_SUFFIX)]
    return None


def invalid_folder_name(job_id: str) -> str:
    """Where a folder dropped as a job is hidden (a dot-name: never read, so never ingested twice)."""
    return f".{job_id}.invalid-folder"


def set_aside_name(name: str, token: str) -> str:
    """A dot-name nothing reads, for an entry planted under one of the runner's names."""
    return f"{name}{_SET_ASIDE}{token}"


# -- logs, staging -----------------------------------------------------------------------------


def log_name(job_id: str, attempt: int) -> str:
    return f"{job_id}.{attempt}.log"


def is_log_of(name: str, job_id: str) -> bool:
    """A log of one of the job's attempts (a purge removes every one)."""
    return name.startswith(job_id + ".")


def tmp_name() -> str:
    """A staging name that says which process wrote it, so a sweep can tell it is abandoned."""
    return f"{os.getpid()}-{os.urandom(6).hex()}.tmp"


def tmp_writer_pid(name: str) -> int | None:
    """The pid a tmp/ name starts with (``tmp_name``, ``purge_marker_name``); None without one."""
    pid_text = name.split("-", 1)[0]
    return int(pid_text) if _is_decimal(pid_text) else None


def purge_marker_name(job_id: str) -> str:
    """Where a purge puts the job file (its commit point): a tmp name that says whose results go.
    If the purger dies, the tmp sweep finishes the purge (``finish_purge``) before removing it,
    so a result left without its job is never mistaken for an acknowledged one that lost its file."""
    return f"{os.getpid()}-purge-{job_id}.tmp"


def parse_purge_marker(name: str) -> str | None:
    """The job id an interrupted purge's marker in tmp/ names; None for any other name."""
    purged = _PURGE_MARKER.fullmatch(name)
    return purged.group(1) if purged else None


# -- locks/ ------------------------------------------------------------------------------------


def job_lock_name(job_id: str) -> str:
    return job_id + _LOCK_SUFFIX


def key_lock_name(key_hash: str) -> str:
    return f"key-{key_hash}{_LOCK_SUFFIX}"


def worker_lock_name(worker: str) -> str:
    return f"{_WORKER_LOCK_PREFIX}{worker}{_LOCK_SUFFIX}"


def worker_of_lock_name(name: str) -> str | None:
    """The worker a ``worker-<name>.lock`` belongs to; None for any other lock."""
    if name.startswith(_WORKER_LOCK_PREFIX) and name.endswith(_LOCK_SUFFIX):
        return name[len(_WORKER_LOCK_PREFIX) : -len(_LOCK_SUFFIX)]
    return None


def coordinator_lock_name() -> str:
    return "coordinator" + _LOCK_SUFFIX


def ledger_lock_name() -> str:
    """Held to create the ledger file or move it aside (``spool.ledger.file``)."""
    return "ledger" + _LOCK_SUFFIX


def ledger_writes_lock_name() -> str:
    """The ledger's writers take turns on it, one write each (``spool.ledger.turns``)."""
    return "ledger-writes" + _LOCK_SUFFIX


# -- the ledger's file -------------------------------------------------------------------------


def ledger_file_names(base: str = LEDGER_NAME) -> tuple[str, str, str]:
    """The ledger (or one set aside) and the side files SQLite names after it: ``<base>``,
    ``<base>-wal``, ``<base>-shm``."""
    return base, base + _LEDGER_SIDE_FILES[0], base + _LEDGER_SIDE_FILES[1]


def ledger_aside_name(now: float, n: int = 1) -> str:
    """``ledger.sqlite3.corrupt-<UTC time>``, then ``.2``, ``.3``... for the n-th at that second."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
    return f"{LEDGER_NAME}.corrupt-{stamp}" if n == 1 else f"{LEDGER_NAME}.corrupt-{stamp}.{n}"


class Layout:
    """A spool's root and its folders, opened once as directory fds (never following symlinks)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(os.path.realpath(root))
        self._fds: dict[str, int] = {}
        try:
            self.root_fd = fs.open_dir(str(self.root))
        except FileNotFoundError:
            raise NotASpool(f"{self.root}: not a spool (no such folder); run `spool init`") from None
        except NotADirectoryError:
            raise NotASpool(f"{self.root}: not a spool (not a folder); run `spool init`") from None
        try:
            check_marker(self.root, self.root_fd)
        except NotASpool:
            fs.close(self.root_fd)
            raise

    def fd(self, folder: str | State) -> int:
        dir_fd = self._fds.get(folder)  # a State is the str of its name (~35 calls a job: no .value)
        if dir_fd is None:
            name = folder.value if isinstance(folder, State) else folder
            try:
                dir_fd = fs.open_dir(name, dir_fd=self.root_fd)
            except OSError as err:
                if err.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise SpoolError(f"{self.root / name}: is not a plain folder (a symlink?); refusing") from None
                raise
            self._fds[name] = dir_fd
        return dir_fd

    def path(self, folder: str | State, name: str = "") -> Path:
        """A path for people and messages; code works through ``fd()``."""
        sub = folder.value if isinstance(folder, State) else folder
        return self.root / sub / name if name else self.root / sub

    @property
    def ledger_path(self) -> Path:
        return self.root / LEDGER_NAME

    @property
    def config_path(self) -> Path:
        return self.root / CONFIG_NAME

    def close(self) -> None:
        for dir_fd in self._fds.values():
            fs.close(dir_fd)
        self._fds.clear()
        fs.close(self.root_fd)


# -- tls/ ---------------------------------------------------------------------------------------

TLS, TOKENS_NAME, CERT_NAME, KEY_NAME, SESSIONS_NAME = "tls", "tokens.yaml", "cert.pem", "key.pem", "sessions.sqlite3"


def tls_lock_name() -> str:
    """Held to write in tls/: tokens.yaml (add, revoke, the server's last-used marks), the
    self-signed pair."""
    return TLS + _LOCK_SUFFIX


# -- schedules/ and queues/ -------------------------------------------------------------------

SCHEDULES, QUEUES = "schedules", "queues"


def schedule_file_name(name: str) -> str:
    """``schedules/<name>.yaml``, and ``queues/<name>.yaml`` too (``queue_file_name``)."""
    return name + JOB_SUFFIX


def schedule_of_file_name(file_name: str) -> str:
    """The schedule's (or queue's) name in ``<name>.yaml``; '' for any other name (a person's, an editor's)."""
    if is_ignored_name(file_name) or not file_name.endswith(JOB_SUFFIX):
        return ""
    return file_name[: -len(JOB_SUFFIX)]


queue_file_name, queue_of_file_name = schedule_file_name, schedule_of_file_name
