"""The parsers behind ``load_yaml`` (``spool.yaml.safe``) for a document the plain reader does not
take: events from libyaml where the document allows it and from PyYAML's pure-Python parser, the
reference, otherwise and on any error (see ``_libyaml_may_parse``); never from a composer
(``CSafeLoader``'s recurses on the C stack: it segfaulted on 60 KB of nested ``[``). Imported on
first such document: PyYAML costs ~9 ms of a process's start-up.
"""

# types-PyYAML leaves the event API (get_event, peek_event, resolve) untyped.
# mypy: disable-error-code="no-untyped-call"

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import yaml
from yaml.events import (
    AliasEvent,
    MappingEndEvent,
    MappingStartEvent,
    ScalarEvent,
    SequenceEndEvent,
    SequenceStartEvent,
    StreamEndEvent,
)

from spool.base.errors import InvalidJob
from spool.yaml.schema import CONVERT, CORE_BY_FIRST, MAX_DEPTH

__all__ = ["load"]


class _Refused(yaml.MarkedYAMLError):
    """A document PyYAML accepts but spool does not; formatted like any other YAML error."""


class _Builder:
    """Events become values here, with our checks: shared by the pure-Python and libyaml parsers.

    Building values straight from events (no node graph, no constructor generators) is both
    where the refusals live and about a fifth of the cost of a load. The parser under it gives
    ``get_event``, ``check_event`` and ``peek_event``.
    """

    get_event: Callable[[], Any]
    check_event: Callable[..., bool]
    peek_event: Callable[[], Any]
    dispose: Callable[[], None]

    def load_single(self) -> object:
        self.get_event()  # StreamStartEvent
        if self.check_event(StreamEndEvent):
            return None
        self.get_event()  # DocumentStartEvent
        value = self._build(0)
        self.get_event()  # DocumentEndEvent
        if not self.check_event(StreamEndEvent):
            event = self.get_event()
            raise _Refused(None, None, "expected one document, found another", event.start_mark)
        return value

    def _build(self, depth: int) -> object:
        event = self.get_event()
        kind = type(event)
        if kind is AliasEvent:
            raise _Refused(None, None, "aliases are not allowed", event.start_mark)
        if event.anchor is not None:
            raise _Refused(None, None, "anchors are not allowed", event.start_mark)
        if event.tag is not None:
            tag = event.tag.replace("tag:yaml.org,2002:", "!!", 1)
            raise _Refused(None, None, f"tags are not allowed ({_short(tag)})", event.start_mark)
        if kind is ScalarEvent:
            if not event.implicit[0]:  # quoted or block: always a string
                return event.value
            return _plain_value(event.value, event.start_mark)
        if depth >= MAX_DEPTH:
            raise _Refused(None, None, f"nesting is deeper than {MAX_DEPTH} levels", event.start_mark)
        if kind is SequenceStartEvent:
            items = []
            while not self.check_event(SequenceEndEvent):
                items.append(self._build(depth + 1))
            self.get_event()
            return items
        assert kind is MappingStartEvent, kind  # the parser yields nothing else here
        mapping: dict[object, object] = {}
        while not self.check_event(MappingEndEvent):
            mark = self.peek_event().start_mark
            key = self._build(depth + 1)
            if isinstance(key, (list, dict)):
                raise _Refused(None, None, "a mapping key must be a scalar", mark)
            if key in mapping:
                raise _Refused(None, None, f"duplicate key {_short(key)}", mark)
            mapping[key] = self._build(depth + 1)
        self.get_event()
        return mapping


def _plain_value(text: str, mark: yaml.Mark | None) -> object:
    """A plain scalar's value by the core schema: null, bool, int, float, or else the text."""
    for tag, pattern in CORE_BY_FIRST.get(text[:1], ()):
        if pattern.match(text):
            try:
                return CONVERT[tag](text)
            except ValueError:  # an int past Python's 4300-digit conversion limit
                raise _Refused(None, None, "number is too large", mark) from None
    return text


class _Loader(_Builder, yaml.SafeLoader):
    """SafeLoader's pure-Python reader, scanner and parser under ``_Builder``: the reference."""

    def need_more_tokens(self) -> bool:
        # The scanner's hottest call (~500 per job). Same answer as upstream, which with no
        # possible simple key pending would sweep an empty dict and compare None; ~15% of a load.
        if self.done:
            return False
        if not self.tokens:
            return True
        if not self.possible_simple_keys:
            return False
        self.stale_possible_simple_keys()
        return bool(self.next_possible_simple_key() == self.tokens_taken)

    def fetch_flow_collection_start(self, token_class: type[yaml.Token]) -> None:
        # Each open `[` may yet be a key, so the scanner reads ahead up to 1024 characters
        # sweeping every open level per token: 60 KB of `[` cost half a second before the
        # builder saw the 33rd. Refusing here keeps that sweep to MAX_DEPTH levels.
        if self.flow_level >= MAX_DEPTH:
            raise _Refused(None, None, f"nesting is deeper than {MAX_DEPTH} levels", self.get_mark())
        super().fetch_flow_collection_start(token_class)

    def scan_flow_scalar_non_spaces(self, double: bool, start_mark: yaml.Mark) -> list[str]:
        # PyYAML turns `"\U00110000"` into chr(0x110000), whose error is no YAMLError.
        try:
            return super().scan_flow_scalar_non_spaces(double, start_mark)
        except (ValueError, OverflowError):  # past U+10FFFF; past a C int
            raise yaml.scanner.ScannerError(
                "while scanning a double-quoted scalar", start_mark, "found an escape past U+10FFFF", self.get_mark()
            ) from None


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _where(mark: yaml.Mark | None) -> str:
    return f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""


def _describe(err: yaml.YAMLError, text: str) -> str:
    if isinstance(err, yaml.reader.ReaderError):
        line = text.count("\n", 0, err.position) + 1
        column = err.position - (text.rfind("\n", 0, err.position) + 1) + 1
        what = f"character #x{err.character:04x} is not allowed"
        return f"{what} at line {line}, column {column}"
    if isinstance(err, yaml.MarkedYAMLError):
        what = f"{err.problem or 'invalid YAML'}{_where(err.problem_mark)}"
        if err.context:
            what += f" ({err.context}{_where(err.context_mark)})"
        return what
    return str(err) or type(err).__name__


def load(data: bytes, *, source: str) -> object:
    """``load_yaml`` of a document the plain reader did not take (``spool.yaml.safe``)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise InvalidJob(f"{source}: not valid UTF-8 at byte {err.start}") from None
    if _CLoader is not None and _libyaml_may_parse(data):
        try:
            return _load_single(_CLoader(data))
        except Exception:  # noqa: BLE001 - any refusal or failure: the reference parser says what and where
            pass
    try:
        return _load_single(_Loader(text))
    except yaml.YAMLError as err:
        message = _describe(err, text).replace("\n", " ")
        raise InvalidJob(f"{source}: {message}") from None
    except RecursionError:  # the depth cap should stop this first; a guard, not a path
        raise InvalidJob(f"{source}: nesting is too deep") from None


def _load_single(loader: _Builder) -> object:
    try:
        return loader.load_single()
    finally:
        loader.dispose()


# libyaml's parser (through PyYAML's CParser events, never its composer) builds the same values
# ~7x faster. Its composer, not the parser, is what crashed on deep nesting: ``_compose_node``
# recurses on the C stack once per level, while libyaml's parser and scanner keep their levels
# on heap stacks (and the libyaml 0.2.6 PyYAML's wheels bundle stops at 1000). ``_Builder`` stops
# at MAX_DEPTH levels whichever parser is under it. Belt and braces, trusting no libyaml's depth
# handling: a level opens only at one of these bytes, so a document with at most
# MAX_C_NESTING_BYTES of them can't nest deeper (were each level a 256-byte C frame, 1 MiB of a
# thread's 8 MiB stack), and any other goes to the pure-Python parser; a job file with 100
# attempt records has ~1,600. Any error on the libyaml path is thrown away and the document
# parsed again by the pure-Python parser, which is the reference: its value or its error is the
# answer (tests/unit/test_yaml_differential.py checks that both give the same on a corpus).
MAX_C_NESTING_BYTES = 4096
_NESTING_BYTES = b"[{-:?"


def _libyaml_may_parse(data: bytes) -> bool:
    """Few enough bytes that can open a level, and none of the spots where the parsers differ.

    Each a difference tests/unit/test_yaml_differential.py found, where libyaml accepts what
    PyYAML refuses or reads it otherwise; none is in a file spool writes (it escapes tabs and
    BOMs and writes only empty flow collections), so the runner's own files stay on libyaml.
    """
    if b"\t" in data:  # libyaml reads `a\tb` as a plain scalar; PyYAML refuses the tab
        return False
    if b"\xef\xbb\xbf" in data:  # a BOM: PyYAML skips only one at the very start, libyaml more
        return False
    if b"?" in data and _has_flow_content(data):
        return False  # in a flow collection PyYAML ends a plain scalar at `?`, libyaml does not
    if b"#" in data and _HEADER_COMMENT.search(data):
        return False  # `|#`: libyaml takes a comment right after a block scalar's header
    return len(data) - len(data.translate(None, _NESTING_BYTES)) <= MAX_C_NESTING_BYTES


_HEADER_COMMENT = re.compile(rb"[|>][-+0-9]*#")


def _has_flow_content(data: bytes) -> bool:
    """A ``[`` or ``{`` that is not an empty ``[]`` or ``{}`` (all the flow style spool writes)."""
    rest = data.replace(b"[]", b"").replace(b"{}", b"")
    return b"[" in rest or b"{" in rest


_CLoader: Callable[[bytes], _Builder] | None = None
if yaml.__with_libyaml__:
    from yaml._yaml import CParser

    class _LibyamlLoader(_Builder, CParser):
        """libyaml's reader, scanner and parser under ``_Builder``; fed the bytes, not the text."""

    _CLoader = _LibyamlLoader
