"""Locks, ``init`` and the config read go through the ``spool.disk.fsio`` seam, so a test that swaps
``fs`` (the power-loss recorder, the fault injector) sees them and can fail them; and
``acquire_within`` waits on the clock it is given, never the host's."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest

from support import behind_the_seam
from spool.base.clock import FakeClock
from spool.base.errors import UsageError
from spool.disk.fsio import RealFS, fs
from spool.disk.layout import FOLDERS, MARKER, Layout, job_lock_name, worker_lock_name
from spool.disk.locks import acquire, acquire_within, is_held
from spool.disk.rootdir import init_spool
from spool.settings import load_settings

SEAM_METHODS = (
    "open_lock",
    "open_lock_to_probe",
    "flock",
    "unflock",
    "overwrite_held",
    "close",
    "set_mode",
    "make_dir",
    "read_small",
)


class CallsFS(RealFS):
    """The real filesystem, noting which seam methods were called; ``failing`` names one that
    raises EIO instead."""

    def __init__(self, failing: str | None = None) -> None:
        super().__init__()
        self.calls: list[str] = []
        self.failing = failing
        for name in SEAM_METHODS:
            setattr(self, name, self._noted(name, getattr(super(), name)))

    def _noted(self, name: str, real: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(name)
            if name == self.failing:
                raise OSError(errno.EIO, os.strerror(errno.EIO))
            return real(*args, **kwargs)

        return call


def test_init_makes_every_folder_and_sets_modes_through_the_seam(tmp_path: Path) -> None:
    with behind_the_seam(CallsFS()) as calls:
        root = init_spool(tmp_path / "s", group_shared=True)
    assert calls.calls.count("make_dir") == 1 + len(FOLDERS)  # the root, then each folder
    assert calls.calls.count("set_mode") == 1 + len(FOLDERS)
    assert (root / MARKER).read_text() == "spool_format: 1\n"
    assert os.stat(root / "pending").st_mode & 0o7777 == 0o2770


def test_init_refuses_what_is_not_an_empty_folder_or_a_spool(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    (tmp_path / "link").symlink_to(tmp_path)
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "src.py").write_text("")
    for name, message in (
        ("file", "exists and is not a folder"),
        ("link", "exists and is not a folder"),
        ("busy", "folder is not empty and is not a spool"),
    ):
        with pytest.raises(Exception, match=message):
            init_spool(tmp_path / name)
    init_spool(tmp_path / "again")
    assert init_spool(tmp_path / "again") == (tmp_path / "again").resolve()  # idempotent


def test_locks_are_taken_probed_published_and_dropped_through_the_seam(tmp_path: Path) -> None:
    layout = Layout(init_spool(tmp_path / "s"))
    locks_fd = layout.fd("locks")
    with behind_the_seam(CallsFS()) as calls:
        lock = acquire(locks_fd, worker_lock_name("w"), blocking=False)
        assert lock is not None
        lock.publish(b'{"name": "w"}\n')
        assert is_held(locks_fd, worker_lock_name("w")) is True
        lock.release()
        assert is_held(locks_fd, worker_lock_name("w")) is False
    assert {"open_lock", "flock", "overwrite_held", "open_lock_to_probe", "close"} <= set(calls.calls)
    assert (layout.path("locks", worker_lock_name("w"))).read_bytes() == b'{"name": "w"}\n'
    layout.close()


def test_a_failing_lock_open_is_an_error_the_caller_sees(tmp_path: Path) -> None:
    layout = Layout(init_spool(tmp_path / "s"))
    with behind_the_seam(CallsFS(failing="flock")), pytest.raises(OSError):
        acquire(layout.fd("locks"), job_lock_name("J1"), blocking=True)
    assert acquire(layout.fd("locks"), job_lock_name("J1"), blocking=False) is not None  # nothing leaked held
    layout.close()


def test_the_config_is_read_through_the_seam(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("max_tries: 4\n")
    with behind_the_seam(CallsFS()) as calls:
        assert load_settings(config, {}, {}).max_tries == 4
    assert calls.calls == ["read_small"]
    with behind_the_seam(CallsFS(failing="read_small")), pytest.raises(UsageError, match="cannot read"):
        load_settings(config, {}, {})


def test_the_fault_layers_inherit_every_seam_method(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "faults"))
    from faultfs import FaultFS
    from powerloss import RecordingFS

    for name in SEAM_METHODS:
        assert callable(getattr(FaultFS(), name)) and callable(getattr(RecordingFS("/"), name))
        assert callable(getattr(fs, name))


def test_acquire_within_waits_on_the_clock_it_is_given(tmp_path: Path) -> None:
    layout = Layout(init_spool(tmp_path / "s"))
    locks_fd = layout.fd("locks")
    clock = FakeClock()
    told: list[float] = []
    with acquire(locks_fd, job_lock_name("J1"), blocking=True):
        started = clock.monotonic()
        got = acquire_within(
            locks_fd, job_lock_name("J1"), 30.0, on_wait=lambda: told.append(clock.monotonic()), clock=clock
        )
    assert got is None
    assert clock.monotonic() - started == pytest.approx(30.0, abs=0.06)  # the fake clock slept, not us
    assert len(told) == 1 and told[0] - started >= 1.0
    layout.close()


def test_a_swap_or_a_method_set_on_fs_reaches_callers_and_the_old_way_in_fails_loudly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The seam keeps its implementation's methods bound (``fsio.Seam``, a cut of the hot path):
    ``use`` and a method set on ``fs`` bind them anew, and what ``use`` replaces is called no
    more; reaching into the seam to swap it (``fs.__dict__["_impl"]``, as tests once did) is an
    error, never a swap that silently changes nothing."""
    with behind_the_seam(CallsFS()) as calls:
        fs.close(os.open(tmp_path, os.O_RDONLY))
    fs.close(os.open(tmp_path, os.O_RDONLY))
    assert calls.calls == ["close"]  # type: ignore[attr-defined]
    closed: list[int] = []
    monkeypatch.setattr(fs, "close", closed.append)
    fs.close(7)
    assert closed == [7]
    monkeypatch.undo()
    fs.close(os.open(tmp_path, os.O_RDONLY))
    assert closed == [7]
    with pytest.raises(AttributeError, match="fsio.use"):
        fs.__dict__  # noqa: B018
    assert fs.file_mode in (0o600, 0o660)  # an attribute that is not a method still reads through
