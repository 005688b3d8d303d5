"""The third-party internals spool overrides still have the shape it relies on.

``runner/wake.py`` reads watchdog's inotify bindings in its own thread (and, in its threaded
fallback, turns off watchdog's move-pairing hold through a class attribute), and
``spool/yaml/safe.py`` subclasses PyYAML's pure-Python scanner, parser and resolver and replaces
two scanner methods. Neither is public API: a new release may rename or reshape them, and the
override would then do nothing (wake-ups 0.5 s late) or break loading. These tests fail first.
Verified with watchdog 7.1.0 and PyYAML 6.0.4.
"""

from __future__ import annotations

import ctypes
import errno
import inspect
import os
import struct
import textwrap

import pytest
import yaml
from watchdog.events import FileClosedNoWriteEvent, FileDeletedEvent, FileMovedEvent, FileOpenedEvent
from watchdog.observers import Observer
from watchdog.observers import inotify as watchdog_inotify
from watchdog.observers import inotify_move_event_grouper
from watchdog.utils.delayed_queue import DelayedQueue

from spool.yaml import safe as yamlsafe


def _parameters(function: object) -> list[str]:
    return list(inspect.signature(function).parameters)  # type: ignore[arg-type]


def test_watchdog_internals_have_the_shape_wake_relies_on() -> None:
    grouper = inotify_move_event_grouper.InotifyMoveEventGrouper
    # A class attribute in seconds, read by __init__ into the queue that holds IN_MOVED_FROM.
    assert isinstance(grouper.__dict__.get("delay"), (int, float)), "InotifyMoveEventGrouper.delay is gone"
    assert _parameters(grouper.__init__) == ["self"]
    assert "DelayedQueue(self.delay)" in inspect.getsource(grouper.__init__)
    # The emitter makes a fresh grouper per watch, after our class attribute is set.
    assert "InotifyMoveEventGrouper" in inspect.getsource(watchdog_inotify)
    # The queue holds a delayed element for self.delay seconds, read when it is taken.
    assert _parameters(DelayedQueue.__init__) == ["self", "delay"]
    assert "delay" in _parameters(DelayedQueue.put)
    assert "self.delay" in inspect.getsource(DelayedQueue.get)
    # The public API wake.py calls, and the event fields it reads.
    assert {"event_handler", "path", "recursive", "event_filter"} <= set(_parameters(Observer.schedule))
    moved = FileMovedEvent("/spool/pending/a.yaml", "/spool/leased/a.yaml")
    assert (moved.src_path, moved.dest_path, moved.is_directory) == (
        "/spool/pending/a.yaml",
        "/spool/leased/a.yaml",
        False,
    )
    assert (
        moved.event_type,
        FileClosedNoWriteEvent("x").event_type,
        FileDeletedEvent("x").event_type,
        FileOpenedEvent("x").event_type,
    ) == ("moved", "closed_no_write", "deleted", "opened")


def test_watchdog_inotify_bindings_have_the_shape_wake_reads_in_its_own_thread() -> None:
    """``runner/wake.py`` reads inotify in the waiting thread through these (else: threads)."""
    from watchdog.observers import inotify_c

    from spool.runner import wake

    binding = wake._inotify_binding()
    assert binding is not None, "watchdog's inotify bindings are gone: Wakers fall back to Observer threads"
    constants = inotify_c.InotifyConstants
    assert (constants.IN_CREATE, constants.IN_MOVED_TO, constants.IN_MODIFY, constants.IN_CLOSE_WRITE) == (
        0x100,
        0x80,
        0x2,
        0x8,
    )
    assert (constants.IN_Q_OVERFLOW, constants.IN_IGNORED, constants.IN_ISDIR, constants.IN_ONLYDIR) == (
        0x4000,
        0x8000,
        0x40000000,
        0x01000000,
    )
    # A staticmethod parsing raw inotify_event structs into (wd, mask, cookie, name).
    assert isinstance(inotify_c.InotifyFD.__dict__.get("_parse_event_buffer"), staticmethod)
    raw = struct.pack("iIII", 3, 0x80, 7, 8) + b"a.yaml\0\0" + struct.pack("iIII", -1, 0x4000, 0, 0)
    assert list(inotify_c.InotifyFD._parse_event_buffer(raw)) == [(3, 0x80, 7, b"a.yaml"), (-1, 0x4000, 0, b"")]
    # ctypes bindings: -1 and errno on failure, a descriptor otherwise.
    fd = inotify_c.inotify_init()
    try:
        assert fd >= 0
        assert inotify_c.inotify_add_watch(fd, b"/nonexistent-spool-folder", constants.IN_CREATE) == -1
        assert ctypes.get_errno() == errno.ENOENT
    finally:
        os.close(fd)


def test_turning_the_hold_off_reaches_a_new_grouper(monkeypatch: pytest.MonkeyPatch) -> None:
    from spool.runner import wake

    grouper = inotify_move_event_grouper.InotifyMoveEventGrouper
    monkeypatch.setattr(grouper, "delay", grouper.delay)  # put back whatever the test found
    wake._no_move_pairing_delay()
    assert grouper.delay == 0.0
    assert grouper()._queue.delay == 0.0


# What spool.yaml.parse._Loader.need_more_tokens reimplements: PyYAML's own, whose answer it must keep.
_UPSTREAM_NEED_MORE_TOKENS = """
def need_more_tokens(self):
    if self.done:
        return False
    if not self.tokens:
        return True
    # The current token may be a potential simple key, so we
    # need to look further.
    self.stale_possible_simple_keys()
    if self.next_possible_simple_key() == self.tokens_taken:
        return True
"""


def test_pyyaml_internals_have_the_shape_yamlsafe_relies_on() -> None:
    scanner = yaml.scanner.Scanner
    upstream = textwrap.dedent(inspect.getsource(scanner.need_more_tokens))
    assert upstream.strip() == _UPSTREAM_NEED_MORE_TOKENS.strip(), "need_more_tokens changed upstream: recheck ours"
    for name in ("stale_possible_simple_keys", "next_possible_simple_key", "fetch_flow_collection_start"):
        assert callable(getattr(scanner, name, None)), f"Scanner.{name} is gone"
    assert _parameters(scanner.fetch_flow_collection_start) == ["self", "TokenClass"]
    assert _parameters(scanner.next_possible_simple_key) == ["self"]
    # The scanner state the overrides read, as a fresh loader has it.
    loader = yaml.SafeLoader("a: 1")
    try:
        assert loader.done is False and isinstance(loader.tokens, list) and loader.tokens_taken == 0
        assert isinstance(loader.possible_simple_keys, dict) and loader.flow_level == 0
        for name in ("get_mark", "get_event", "peek_event", "check_event", "resolve", "dispose"):
            assert callable(getattr(loader, name, None)), f"SafeLoader.{name} is gone"
    finally:
        loader.dispose()
    assert _parameters(yaml.resolver.BaseResolver.resolve) == ["self", "kind", "value", "implicit"]
    assert _parameters(yaml.resolver.BaseResolver.add_implicit_resolver) == ["tag", "regexp", "first"]  # a classmethod
    # The 1.1 table the dumper copies as traps: first character -> [(tag, pattern)].
    table = yaml.resolver.Resolver.yaml_implicit_resolvers
    assert isinstance(table, dict) and all(
        isinstance(tag, str) and hasattr(pattern, "match") for entries in table.values() for tag, pattern in entries
    )
    assert _parameters(yaml.MarkedYAMLError.__init__)[:5] == [
        "self",
        "context",
        "context_mark",
        "problem",
        "problem_mark",
    ]
    assert {"position", "character"} <= set(_parameters(yaml.reader.ReaderError.__init__))
    dumper = yaml.SafeDumper
    for name in (
        "represent_data",
        "represent_scalar",
        "ignore_aliases",
        "represent_none",
        "represent_bool",
        "represent_int",
        "represent_float",
        "represent_list",
        "represent_dict",
    ):
        assert callable(getattr(dumper, name, None)), f"SafeDumper.{name} is gone"
    assert "style" in _parameters(dumper.represent_scalar)
    for name in ("yaml_representers", "yaml_multi_representers", "yaml_implicit_resolvers"):
        assert isinstance(getattr(dumper, name, None), dict), f"SafeDumper.{name} is gone"


def test_the_overrides_still_take_effect() -> None:
    """The behaviour each override exists for, end to end through PyYAML's machinery."""
    from spool.base.errors import InvalidJob

    with pytest.raises(InvalidJob, match="nesting is deeper than"):
        yamlsafe.load_yaml(b"[" * 60_000, max_bytes=1 << 20, source="t")
    assert yamlsafe.load_yaml(b"a: [1, {b: on}]\nc: 0123\n", max_bytes=1 << 10, source="t") == {
        "a": [1, {"b": "on"}],
        "c": 123,
    }
    assert yamlsafe.dump_yaml({"a": "on"}) == b"a: 'on'\n"
