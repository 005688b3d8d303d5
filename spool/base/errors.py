"""Every error spool raises, and the exit code the command line gives it.

    SpoolError                  exit 1   an operation failed
    +-- NotASpool               exit 1   the folder has no .spool marker
    +-- UsageError              exit 2   the caller's words are off (a flag, a repeated -a key)
    +-- InvalidJob              exit 2   a job spec or file broke the schema; says where and why
    +-- NotFound                exit 3   an unknown id, a missing dependency, no result yet
    +-- TryLater                exit 75  backpressure (max_pending reached)
    |   +-- DiskFull            exit 75  ENOSPC while accepting a job
    +-- DurabilityError         exit 1   an fsync failed: never retried into a success
    +-- LedgerError             exit 1   the ledger (the SQLite index) failed; the files are as they were
    |   +-- LedgerUnusable      exit 1   the ledger file is not a database: moved aside and rebuilt by
    |                                    ``spool fsck --repair`` or a running coordinator
    +-- TransitionLost          exit 1   a move lost its race; the job is as the winner left it
        +-- NotClaimable                 the job is no longer in pending/, or is locked
        +-- LeaseLost                    the lease was expired, cancelled or revoked (stale fence)
        +-- AlreadyTerminal              the job is done or dead already; nothing changed

The command line maps an error to its exit code in one place, by ``exit_code``.
"""

from __future__ import annotations


class SpoolError(Exception):
    """Base of every error spool raises on purpose."""

    exit_code = 1


class NotASpool(SpoolError):
    """The folder is not a spool: run ``spool init``."""


class UsageError(SpoolError):
    exit_code = 2


class InvalidJob(SpoolError):
    """A job spec or job file is malformed; the message names the field, value and expectation."""

    exit_code = 2


class NotFound(SpoolError):
    exit_code = 3


class Withdrawn(SpoolError):
    """A submit's ``unless`` said, under the key's lock, that the job must not be made after all
    (a schedule's slot recorded fired meanwhile); nothing was written."""


class TryLater(SpoolError):
    """The spool is full (``max_pending``); nothing was written. Retry after a while."""

    exit_code = 75


class DiskFull(TryLater):
    """ENOSPC while accepting a job; nothing was acknowledged."""


class DurabilityError(SpoolError):
    """An fsync failed. The kernel may have dropped the data (a retried fsync can report success
    for pages it already threw away), so this is final: never retried into a success."""


class LedgerError(SpoolError):
    """The ledger failed (locked too long, read-only, an I/O error). It is an index: the files,
    the truth, are as they were, and the coordinator's reconcile brings it back in step."""


class LedgerUnusable(LedgerError):
    """The ledger file is not a database (corrupt, or not SQLite at all): ``spool fsck --repair``
    or a running coordinator moves it aside and rebuilds it from the files."""


class TransitionLost(SpoolError):
    """A transition found the job not where the caller believed; nothing was changed."""


class NotClaimable(TransitionLost):
    pass


class LeaseLost(TransitionLost):
    pass


class AlreadyTerminal(TransitionLost):
    pass
