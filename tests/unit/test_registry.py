"""The handler registry: names, clashes, ``current()``, task-module imports, and ``wordcount``."""

from __future__ import annotations

import dataclasses
import importlib
import random
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import spool
from spool import builtin_tasks, registry
from spool.base.clock import FakeClock
from spool.base.errors import UsageError
from spool.registry import Current, Reject, current, handler_for, is_valid_task_name, registered, set_current, task


@pytest.fixture(autouse=True)
def own_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test registers into a copy, so no name leaks from one test to the next."""
    monkeypatch.setattr(registry, "_handlers", dict(registry._handlers))


def test_the_package_exports_the_handler_api() -> None:
    assert (spool.task, spool.Reject, spool.current) == (task, Reject, current)
    assert issubclass(Reject, Exception)


def test_task_registers_and_returns_the_callable() -> None:
    def handler() -> int:
        return 1

    assert task("t.one")(handler) is handler
    assert handler_for("t.one") is handler
    assert {"t.one", "wordcount"} <= registered()
    assert handler_for("t.missing") is None
    assert "shell" not in registered()


def test_registering_the_same_callable_twice_is_fine_another_is_not() -> None:
    def first() -> None: ...

    def second() -> None: ...

    task("t.same")(first)
    task("t.same")(first)
    with pytest.raises(ValueError, match="already registered"):
        task("t.same")(second)
    assert handler_for("t.same") is first


def test_a_reloaded_module_registers_its_new_definitions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = "from spool import task\n@task('t.reloaded')\ndef handler():\n    return 1\n"
    (tmp_path / "reloaded_tasks_mod.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        module = importlib.import_module("reloaded_tasks_mod")
        old = handler_for("t.reloaded")
        importlib.reload(module)
        assert handler_for("t.reloaded") is module.handler is not old
    finally:
        sys.modules.pop("reloaded_tasks_mod", None)


def test_two_lambdas_or_closures_are_different_callables() -> None:
    def make() -> Callable[[], int]:
        def handler() -> int:
            return 1

        return handler

    task("t.closure")(make())
    with pytest.raises(ValueError, match="already registered"):
        task("t.closure")(make())
    task("t.lambda")(lambda: 1)
    with pytest.raises(ValueError, match="already registered"):
        task("t.lambda")(lambda: 2)


@pytest.mark.parametrize("name", ["a", "A9", "wordcount2", "billing.send-invoice_v2", "x" * 64])
def test_valid_names(name: str) -> None:
    task(name)(lambda: None)
    assert name in registered()


@pytest.mark.parametrize("name", ["", "-a", ".a", "_a", "a b", "a/b", "ä", "x" * 65, "a\n", 7])
def test_invalid_names(name: Any) -> None:
    with pytest.raises(ValueError, match="must match"):
        task(name)


def test_shell_is_reserved() -> None:
    with pytest.raises(ValueError, match="reserved"):
        task("shell")


def test_current_outside_a_handler_raises() -> None:
    with pytest.raises(RuntimeError, match="inside a handler"):
        current()


def test_current_is_one_frozen_value_seen_by_every_thread() -> None:
    value = Current(job_id="j", attempt=2, tries_left=1, deadline=123.5)
    seen: list[Current] = []
    set_current(value)
    try:
        assert current() is value
        thread = threading.Thread(target=lambda: seen.append(current()))
        thread.start()
        thread.join()
        assert seen == [value]
        with pytest.raises(dataclasses.FrozenInstanceError):
            value.attempt = 3  # type: ignore[misc]
    finally:
        set_current(None)
    with pytest.raises(RuntimeError):
        current()


def test_seconds_left_reads_the_clock_it_is_given() -> None:
    clock = FakeClock(wall=1000.0)
    on_the_wall = Current("j", 1, 0, deadline=1030.0)
    both = Current("j", 1, 0, deadline=0.0, monotonic_deadline=clock.monotonic() + 20)
    assert (on_the_wall.seconds_left(clock), both.seconds_left(clock)) == (30.0, 20.0)
    clock.set_wall(5000.0)  # a wall-clock step: the monotonic deadline does not move
    clock.advance(5)
    assert (on_the_wall.seconds_left(clock), both.seconds_left(clock)) == (0.0, 15.0)
    assert [f.name for f in dataclasses.fields(Current)] == [  # what a handler's asdict(current()) holds
        "job_id",
        "attempt",
        "tries_left",
        "deadline",
        "monotonic_deadline",
    ]


def test_import_task_modules_runs_their_decorators(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "good_tasks_mod.py").write_text(
        "from spool import task\n@task('t.from_module')\ndef handler():\n    return 1\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        registry.import_task_modules(["good_tasks_mod"])
        assert "t.from_module" in registered()
    finally:
        sys.modules.pop("good_tasks_mod", None)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (None, "ModuleNotFoundError: No module named 'bad_tasks_mod'"),
        ("raise RuntimeError('first line\\nlast line')\n", "RuntimeError: last line"),
        ("def broken(:\n", "SyntaxError: "),
        ("import sys\nsys.exit(4)\n", "SystemExit: 4"),
    ],
)
def test_a_failing_import_is_one_usage_line_naming_the_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str | None, expected: str
) -> None:
    if source is not None:
        (tmp_path / "bad_tasks_mod.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(UsageError) as caught:
        registry.import_task_modules(["bad_tasks_mod"])
    message = str(caught.value)
    assert message.startswith("cannot import task module 'bad_tasks_mod': ")
    assert expected in message and "\n" not in message
    assert caught.value.exit_code == 2


def test_the_builtin_handlers_are_registered_from_the_start() -> None:
    assert builtin_tasks.BUILTIN == {"wordcount": builtin_tasks.wordcount}
    for name, handler in builtin_tasks.BUILTIN.items():
        assert is_valid_task_name(name) and name not in registry.RESERVED
        assert handler_for(name) is handler


def test_task_names_follow_one_rule() -> None:
    assert all(is_valid_task_name(name) for name in ("a", "wordcount", "my.task-2_x", "A" * 64))
    assert not any(is_valid_task_name(name) for name in ("", ".a", "-a", "a b", "a/b", "A" * 65, 7, None))


def test_wordcount_is_always_registered(tmp_path: Path) -> None:
    book = tmp_path / "book.txt"
    book.write_text("It was the best\tof times,\n\nit was  the worst of times.\n")
    handler = handler_for("wordcount")
    assert handler is not None and handler(path=str(book)) == {"words": 12}


def test_wordcount_reads_bad_utf8_with_replacement(tmp_path: Path) -> None:
    (tmp_path / "bin").write_bytes(b"caf\xe9 ol\xc3\xa9 \xff\xfe end")
    assert builtin_tasks.wordcount(str(tmp_path / "bin")) == {"words": 4}
    (tmp_path / "empty").write_bytes(b"")
    assert builtin_tasks.wordcount(str(tmp_path / "empty")) == {"words": 0}


def test_wordcount_counts_words_cut_by_its_reading_pieces(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(builtin_tasks, "_CHUNK_CHARS", 3)
    rng = random.Random(1234)
    for i in range(200):
        text = "".join(rng.choice("ab \n\t\u3000") for _ in range(rng.randrange(0, 40)))
        path = tmp_path / f"text{i}"
        path.write_text(text, encoding="utf-8")
        assert builtin_tasks.wordcount(str(path)) == {"words": len(text.split())}, repr(text)


def test_wordcount_rejects_a_non_string_path_and_fails_on_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(TypeError):
        builtin_tasks.wordcount(7)  # type: ignore[arg-type]
    with pytest.raises(FileNotFoundError):
        builtin_tasks.wordcount(str(tmp_path / "missing"))
