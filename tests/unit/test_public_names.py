"""The names a user's code imports stay where the README put them, whatever folders the code
grows: ``from spool import Spool, task``, and the error classes under ``spool.errors`` and on
the package, the same classes the runner raises."""

from __future__ import annotations

import spool
import spool.base.errors as floor
import spool.errors as public


def test_the_error_classes_are_where_users_catch_them() -> None:
    for name in public.__all__:
        assert getattr(public, name) is getattr(floor, name), name
    for name in ("SpoolError", "InvalidJob", "NotFound", "TryLater", "DiskFull"):
        assert getattr(spool, name) is getattr(floor, name), name
    assert {cls.__name__ for cls in vars(floor).values() if isinstance(cls, type)} <= set(public.__all__)


def test_the_readmes_imports_work() -> None:
    from spool import Reject, Spool, current, progress, task

    assert callable(task) and callable(current) and callable(progress) and Spool.__name__ == "Spool"
    assert issubclass(Reject, Exception)
