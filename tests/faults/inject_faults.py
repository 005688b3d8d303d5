"""Fault injection in a real spool process, for tests only: import this module into it.

    FAULTFS_FAIL=fsync:1:EIO  spool worker --import tests.faults.inject_faults --import examples.tasks
    FAULTFS_FAIL=write:1:ENOSPC  python -c "import tests.faults.inject_faults; \\
        from spool.cli.main import main; main()" submit echo

``FAULTFS_FAIL=<kind>:<n>:<errno name>`` makes the n-th call of that kind (write, fsync, rename,
link; see faultfs.py) fail with that error, counted from the import. Without the variable the
import does nothing. The variable is removed from the environment once read, so processes this
one starts (a worker's attempt child) run without faults.

The product has no hook for this, and needs none: every filesystem call spool makes on a spool
goes through the one seam ``spool.disk.fsio.fs``, and ``FaultFS.install()`` puts a FaultFS behind it
with ``spool.disk.fsio.use``, for the whole process, as the in-process tests do with ``installed()``.
Modules imported before or after this one see the same seam.
"""

from __future__ import annotations

import errno
import os

from tests.faults.faultfs import KINDS, FaultFS

VARIABLE = "FAULTFS_FAIL"


def _install_from_environment() -> FaultFS | None:
    spec = os.environ.pop(VARIABLE, None)
    if not spec:
        return None
    kind, count, name = spec.split(":")
    if kind not in KINDS or not hasattr(errno, name):
        raise SystemExit(f"{VARIABLE}={spec}: expected <{'|'.join(KINDS)}>:<n>:<errno name>")
    faults = FaultFS(fail_at=int(count), error=getattr(errno, name), kinds={kind})
    faults.install()
    return faults


INSTALLED = _install_from_environment()
