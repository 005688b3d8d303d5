"""The only way spool reads or writes YAML: job files and ``config.yaml`` are untrusted input.

``load_yaml`` caps the size before parsing, decodes strict UTF-8 and parses with a subclass of
PyYAML's pure-Python ``SafeLoader`` (``CSafeLoader`` segfaults, killing the process, on 60 KB of nested ``[``)
that refuses anchors, aliases, explicit tags and duplicate keys, stops at 32 levels of nesting,
and resolves plain scalars by YAML 1.2's core schema (no yes/no booleans, no octal ``0123``, no
implicit dates). It returns only dict, list, str, int, float, bool and None; every failure is
one ``InvalidJob`` line that starts with the source and says what and where.

``dump_yaml`` writes block style with the same resolvers, so a string that would read back as
anything else is quoted, and also quotes what a YAML 1.1 reader would misread (``on``, dates).
"""

# types-PyYAML leaves the event API (get_event, peek_event, resolve) untyped.
# mypy: disable-error-code="no-untyped-call"

from __future__ import annotations

import math
import re
from collections.abc import Callable

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
from yaml.nodes import ScalarNode

from spool.errors import InvalidJob

__all__ = ["MAX_DEPTH", "dump_yaml", "load_yaml"]

MAX_DEPTH = 32

_NULL = "tag:yaml.org,2002:null"
_BOOL = "tag:yaml.org,2002:bool"
_INT = "tag:yaml.org,2002:int"
_FLOAT = "tag:yaml.org,2002:float"
_STR = "tag:yaml.org,2002:str"
# Any tag but str makes the dumper quote a string; this one marks YAML 1.1 readings.
_YAML11 = "tag:spool,2026:yaml11-trap"

# YAML 1.2 core schema (tag, pattern, first characters). ``\Z``, not ``$``: ``$`` also matches
# before a final newline. int is listed before float so "123" is an int.
_CORE_SCHEMA: list[tuple[str, re.Pattern[str], list[str]]] = [
    (_NULL, re.compile(r"(?:~|null|Null|NULL|)\Z"), ["~", "n", "N", ""]),
    (_BOOL, re.compile(r"(?:true|True|TRUE|false|False|FALSE)\Z"), list("tTfF")),
    (_INT, re.compile(r"(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)\Z"), list("-+0123456789")),
    (
        _FLOAT,
        re.compile(
            r"(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
            r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))\Z"
        ),
        list("-+.0123456789"),
    ),
]


def _to_int(text: str) -> int:
    if text.startswith(("0o", "0x")):
        return int(text, 0)
    return int(text, 10)  # base 10 even with leading zeros: 0123 is 123, never octal


def _to_float(text: str) -> float:
    if text[-1] in "fF":
        return -math.inf if text[0] == "-" else math.inf
    if text[-1] in "nN":
        return math.nan
    return float(text)


_CONVERT: dict[str, Callable[[str], object]] = {
    _NULL: lambda text: None,
    _BOOL: lambda text: text[0] in "tT",
    _INT: _to_int,
    _FLOAT: _to_float,
}


class _Refused(yaml.MarkedYAMLError):
    """A document PyYAML accepts but spool does not; formatted like any other YAML error."""


class _Loader(yaml.SafeLoader):
    """SafeLoader's reader, scanner and parser; events become values here, with our checks.

    Building values straight from events (no node graph, no constructor generators) is both
    where the refusals live and about a fifth of the cost of a load.
    """

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
            tag = self.resolve(ScalarNode, event.value, (True, False))
            convert = _CONVERT.get(tag)
            if convert is None:
                return event.value
            try:
                return convert(event.value)
            except ValueError:  # an int past Python's 4300-digit conversion limit
                raise _Refused(None, None, "number is too large", event.start_mark) from None
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


# Fresh tables: add_implicit_resolver would otherwise start from a copy of PyYAML's YAML 1.1 one.
_Loader.yaml_implicit_resolvers = {}
for _tag, _pattern, _first in _CORE_SCHEMA:
    _Loader.add_implicit_resolver(_tag, _pattern, _first)


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


def load_yaml(data: bytes, *, max_bytes: int, source: str) -> object:
    """Parse one untrusted YAML document into dict/list/str/int/float/bool/None values.

    Raises ``InvalidJob`` (``"<source>: <what> at line L, column C"``) for anything refused.
    """
    if len(data) > max_bytes:
        raise InvalidJob(f"{source}: {len(data)} bytes is over the limit of {max_bytes}")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise InvalidJob(f"{source}: not valid UTF-8 at byte {err.start}") from None
    try:
        loader = _Loader(text)
        try:
            return loader.load_single()
        finally:
            loader.dispose()
    except yaml.YAMLError as err:
        message = _describe(err, text).replace("\n", " ")
        raise InvalidJob(f"{source}: {message}") from None
    except RecursionError:  # the depth cap should stop this first; a guard, not a path
        raise InvalidJob(f"{source}: nesting is too deep") from None


class _Dumper(yaml.SafeDumper):
    """SafeDumper that writes only what ``load_yaml`` reads back to the same value."""

    _depth = 0

    def ignore_aliases(self, data: object) -> bool:
        # A value seen twice is written twice: the loader refuses anchors and aliases.
        return True

    def represent_data(self, data: object) -> yaml.Node:
        if isinstance(data, (dict, list, tuple)):
            if self._depth >= MAX_DEPTH:
                raise InvalidJob(f"nesting is deeper than {MAX_DEPTH} levels")
            self._depth += 1
            try:
                return super().represent_data(data)
            finally:
                self._depth -= 1
        return super().represent_data(data)

    def represent_text(self, data: str) -> yaml.Node:
        # PyYAML writes NEL, LS and PS raw inside single quotes, where a reader folds them into
        # spaces: only double quotes, which escape them, keep them. A multi-line string (a
        # traceback) reads best as a literal block under `cat`; the emitter falls back to
        # quotes when a block can't hold the string exactly.
        style = None
        if _ODD_BREAKS.search(data):
            style = '"'
        elif "\n" in data:
            style = "|"
        return self.represent_scalar(_STR, str.__str__(data), style=style)

    def represent_unsupported(self, data: object) -> yaml.Node:
        raise TypeError(f"dump_yaml cannot write a {type(data).__name__}")


_ODD_BREAKS = re.compile("[\x85\u2028\u2029]")

_Dumper.yaml_implicit_resolvers = {}
_Dumper.yaml_representers = {}
_Dumper.yaml_multi_representers = {}
for _tag, _pattern, _first in _CORE_SCHEMA:
    _Dumper.add_implicit_resolver(_tag, _pattern, _first)
# After the core schema, so a real int or bool still matches its own tag first.
for _first_char, _entries in yaml.resolver.Resolver.yaml_implicit_resolvers.items():
    for _tag, _pattern in _entries:
        _Dumper.add_implicit_resolver(_YAML11, _pattern, [_first_char])
_Dumper.add_implicit_resolver(_YAML11, re.compile(r"(?:y|Y|n|N)\Z"), list("yYnN"))

_Dumper.add_representer(type(None), yaml.SafeDumper.represent_none)
_Dumper.add_representer(bool, yaml.SafeDumper.represent_bool)
_Dumper.add_representer(int, yaml.SafeDumper.represent_int)
_Dumper.add_representer(float, yaml.SafeDumper.represent_float)
_Dumper.add_representer(str, _Dumper.represent_text)
_Dumper.add_representer(list, yaml.SafeDumper.represent_list)
_Dumper.add_representer(tuple, yaml.SafeDumper.represent_list)
_Dumper.add_representer(dict, yaml.SafeDumper.represent_dict)
_Dumper.add_multi_representer(str, _Dumper.represent_text)  # StrEnum values and the like
# None is PyYAML's key for "any other type".
_Dumper.add_representer(None, _Dumper.represent_unsupported)  # type: ignore[arg-type]


def dump_yaml(obj: object) -> bytes:
    """Write ``obj`` (JSON-like values, tuples as lists) as block-style UTF-8 YAML.

    Raises ``InvalidJob`` past ``MAX_DEPTH`` levels of nesting and ``TypeError`` for other types.
    """
    out = yaml.dump(
        obj,
        Dumper=_Dumper,
        default_flow_style=False,
        sort_keys=False,
        allow_unicode=True,
        encoding="utf-8",
    )
    assert isinstance(out, bytes)
    return out
