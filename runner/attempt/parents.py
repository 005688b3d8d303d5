"""A child job's view of its parents' results: ``{parent_id: result}``, read when its attempt starts.

Who reads, and why there: the process that claimed the job, before any handler runs: a local
worker (``runner.worker``) from its spool's ``results/``, the server (``runner.api.leases``) for
a remote worker's lease, which then carries the mapping. Both hand it to the attempt child with
the request, so ``spool.current().parent_results()`` and ``SPOOL_PARENT_RESULTS`` behave alike
on every worker, and a child on a host with no spool needs nothing more. Reading before the
attempt, not lazily in the handler, lets a mapping that can never be handed over end the job
before anything runs; a job without ``depends_on`` reads nothing.

The rules (every parent is done when its child runs, so each has its result):

- bounded: the parents' result files together are at most ``max_parent_results_bytes`` (16 MiB
  by default; each one is already under ``max_result_bytes``). Past it the attempt ends
  **rejected** (dead at once, no retry), its error naming the total, the cap and the biggest
  parents: results never change, so no retry could succeed. Raise the setting and ``spool
  requeue`` the job.
- a parent's result gone (purged after the child was promoted), a symlink or a file that is not
  JSON: rejected too, the error naming that parent: no retry brings it back.
- any other read error (EIO, EMFILE) is an ordinary failed attempt, retried after its backoff.

A ``shell`` job gets the same mapping as a JSON file whose path is ``SPOOL_PARENT_RESULTS``,
always (``{}`` without parents), written by the attempt child (``parents_file``) for the one
command and removed when it ends. It goes in the spool's ``tmp/`` under a name that starts with
the child's pid (``layout.tmp_name``), so the coordinator's tmp sweep removes it
if the child is killed before it could (a timeout, a dead worker); a remote worker's child, with
no spool, uses the system's temporary folder (``$TMPDIR``), where only a kill leaves one behind.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING

from spool.base.errors import InvalidJob
from spool.disk import fs, result_name, tmp_name

if TYPE_CHECKING:  # the attempt child imports this module for parents_file: it stays light
    from spool.handle import Handle
    from spool.job import Job

__all__ = ["ParentResultsError", "parent_results", "parents_file", "scratch_dir_of"]

_NAMED = 5  # parents named one by one in the over-the-cap error (the biggest)


class ParentResultsError(Exception):
    """The parents' results could not be read for this attempt. ``reject``: never can be (the
    job ends dead at once); else the attempt fails and is retried."""

    def __init__(self, message: str, *, reject: bool) -> None:
        super().__init__(message)
        self.reject = reject


def parent_results(sp: Handle, job: Job) -> dict[str, object]:
    """``{parent_id: result}`` for each of ``job.depends_on`` (``{}`` for none), within
    ``max_parent_results_bytes``; ParentResultsError if not (see the module's rules)."""
    if not job.depends_on:
        return {}
    results_fd = sp.layout.fd("results")
    sizes: dict[str, int] = {}
    for parent in job.depends_on:
        info = fs.lstat(results_fd, result_name(parent))
        if info is None:
            raise ParentResultsError(
                f"parent {parent} has no result (results/{result_name(parent)} is gone: purged?); "
                "its result can never be handed to this job",
                reject=True,
            )
        sizes[parent] = info.st_size
    _check_cap(sizes, sp.settings.max_parent_results_bytes)
    mapping: dict[str, object] = {}
    for parent, size in sizes.items():
        try:
            mapping[parent] = json.loads(fs.read_file(results_fd, result_name(parent), size))
        except FileNotFoundError:
            message = f"parent {parent}'s result was removed while being read (purged?)"
            raise ParentResultsError(message, reject=True) from None
        except (InvalidJob, ValueError, RecursionError) as err:  # a symlink, a FIFO, not JSON
            raise ParentResultsError(f"parent {parent}'s result is unreadable: {err}", reject=True) from None
        except OSError as err:
            raise ParentResultsError(
                f"parent {parent}'s result could not be read: {err.strerror or err}", reject=False
            ) from None
    return mapping


def _check_cap(sizes: Mapping[str, int], cap: int) -> None:
    total = sum(sizes.values())
    if total <= cap:
        return
    biggest = sorted(sizes.items(), key=lambda item: -item[1])[:_NAMED]
    named = ", ".join(f"{parent} {size:,} bytes" for parent, size in biggest)
    more = f" and {len(sizes) - _NAMED} more parents" if len(sizes) > _NAMED else ""
    raise ParentResultsError(
        f"parents' results are {total:,} bytes in all, over max_parent_results_bytes ({cap:,}): "
        f"{named}{more}; raise the setting and requeue the job",
        reject=True,
    )


def scratch_dir_of(sp: Handle) -> str:
    """The spool's tmp/ as a path for the attempt child, where it is now: read from the folder's
    descriptor, so a spool renamed while the worker runs still gets its shell jobs' files."""
    try:
        return os.readlink(f"/proc/self/fd/{sp.layout.fd('tmp')}")
    except OSError:  # no /proc: the path the spool was opened at
        return str(sp.layout.path("tmp"))


@contextmanager
def parents_file(mapping: Mapping[str, object], scratch_dir: str | None) -> Iterator[str]:
    """A file holding ``mapping`` as JSON (0600), for one shell command; its path, removed after.

    In ``scratch_dir`` (the spool's tmp/: swept once we are gone) under a name that starts with
    our pid, or the system's temporary folder when None. The folder is opened without following
    a symlink, the file created exclusively, so nothing planted there is written through.
    """
    data = json.dumps(mapping, separators=(",", ":")).encode()
    name = tmp_name()  # it starts with our pid: the tmp sweep removes it once we are gone
    if scratch_dir is None:
        scratch_dir, name = tempfile.gettempdir(), f"spool-parents-{name}"
    dir_fd = os.open(scratch_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
        try:
            with os.fdopen(fd, "wb") as out:  # closes fd
                out.write(data)
            yield os.path.join(scratch_dir, name)
        finally:
            try:
                os.unlink(name, dir_fd=dir_fd)
            except FileNotFoundError:
                pass  # a person, or a sweep that took us for gone
    finally:
        os.close(dir_fd)
