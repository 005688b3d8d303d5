"""spool.disk.ids and spool.disk.layout: ids are safe file names in submission order; the layout is
made and refused right."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from spool.disk import ids
from spool.base.errors import NotASpool, SpoolError
from spool.disk.layout import (
    FOLDERS,
    MARKER,
    Layout,
    State,
    cancel_name,
    heartbeat_name,
    is_ignored_name,
    job_name,
    key_name,
    tmp_name,
)
from spool.disk.rootdir import init_spool, refuse_unsafe_root
from spool.spool import Spool


def test_ids_are_26_safe_characters_and_strictly_increasing() -> None:
    made = [ids.new_id() for _ in range(5000)]
    assert made == sorted(made) and len(set(made)) == len(made)
    assert all(len(i) == 26 and ids.is_valid_id(i) for i in made)


def test_forked_children_do_not_repeat_the_parents_next_id() -> None:
    """A clock ahead of real time (a FakeClock in an earlier test, a wall clock stepped back) pins
    the process's ids to that millisecond; children forked then each made the same next id."""
    from spool.base.clock import FakeClock

    ids.new_id(FakeClock(wall=4_102_444_800.0))  # 2100-01-01: real time stays behind it
    children = []
    for _ in range(4):
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: one id to the pipe, then out without running the parent's cleanup
            os.write(write_end, ids.new_id().encode())
            os._exit(0)
        os.close(write_end)
        children.append((pid, read_end))
    made = []
    for pid, read_end in children:
        os.waitpid(pid, 0)
        made.append(os.read(read_end, 64).decode())
        os.close(read_end)
    assert len(set(made)) == 4 and all(ids.is_valid_id(i) for i in made), made


@pytest.mark.parametrize(
    "text", ["", ".", "..", "../x", "a/b", "-a", "_a", "a.b", "a\x00", "a b", "é", "a" * 65, 5, None, "a\n"]
)
def test_is_valid_id_refuses_anything_that_could_leave_its_folder(text: object) -> None:
    assert not ids.is_valid_id(text)


@pytest.mark.parametrize("text", ["a", "A9", "a_b-c", "a" * 64])
def test_is_valid_id_accepts(text: str) -> None:
    assert ids.is_valid_id(text)


def test_names_the_layout_builds() -> None:
    assert job_name("X1") == "X1.yaml"
    assert heartbeat_name("X1", 3) == ".X1.3.hb" and cancel_name("X1") == ".X1.cancel"
    assert is_ignored_name(heartbeat_name("X1", 3)) and is_ignored_name(cancel_name("X1"))
    assert is_ignored_name(".wake") and is_ignored_name("mine.yaml.tmp") and not is_ignored_name("mine.yaml")
    assert tmp_name().startswith(f"{os.getpid()}-") and tmp_name().endswith(".tmp")


def test_keys_are_hashed_never_used_as_names() -> None:
    name = key_name("../../etc/passwd")
    assert len(name) == 64 and set(name) <= set("0123456789abcdef")
    assert key_name("a") != key_name("b") and key_name("a") == key_name("a")


def test_init_makes_every_folder_private_and_the_marker(tmp_path: Path) -> None:
    root = init_spool(tmp_path / "s")
    assert (root / MARKER).read_text() == "spool_format: 1\n"
    for folder in FOLDERS:
        assert stat.S_IMODE(os.stat(root / folder).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(root).st_mode) == 0o700
    assert init_spool(root) == root  # idempotent
    shared = init_spool(tmp_path / "g", group_shared=True)
    for path in (shared, shared / "pending"):  # setgid: every file keeps the spool's group
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o2770


def test_init_refuses_a_non_empty_folder_that_is_not_a_spool(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "main.py").write_text("print()")
    with pytest.raises(SpoolError, match="not empty and is not a spool"):
        init_spool(tmp_path / "src")
    assert os.listdir(tmp_path / "src") == ["main.py"]
    (tmp_path / "file").write_text("x")
    with pytest.raises(SpoolError, match="not a folder"):
        init_spool(tmp_path / "file")


def test_a_folder_without_the_marker_is_not_a_spool(tmp_path: Path) -> None:
    for path in (tmp_path / "missing", tmp_path):
        with pytest.raises(NotASpool, match="not a spool.*spool init"):
            Layout(path)
    (tmp_path / "file").write_text("x")
    with pytest.raises(NotASpool):
        Layout(tmp_path / "file")


def test_a_symlinked_state_folder_is_refused(tmp_path: Path) -> None:
    root = init_spool(tmp_path / "s")
    os.rmdir(root / "pending")
    (tmp_path / "elsewhere").mkdir()
    os.symlink(tmp_path / "elsewhere", root / "pending")
    layout = Layout(root)
    with pytest.raises(SpoolError, match="not a plain folder"):
        layout.fd(State.PENDING)
    layout.close()


def test_a_spool_writable_by_everyone_is_refused(tmp_path: Path) -> None:
    root = init_spool(tmp_path / "s")
    os.chmod(root, 0o777)
    with pytest.raises(SpoolError, match="writable by every user"):
        refuse_unsafe_root(root)
    with pytest.raises(SpoolError, match="writable by every user"):
        Spool(root, environ={})


def test_the_root_resolves_once_through_a_symlink(tmp_path: Path) -> None:
    root = init_spool(tmp_path / "s")
    os.symlink(root, tmp_path / "link")
    layout = Layout(tmp_path / "link")
    assert layout.root == root and layout.path(State.DONE, "x.yaml") == root / "done" / "x.yaml"
    layout.close()
