"""``dump_yaml``: block-style YAML that ``spool.yaml.safe.load_yaml`` reads back to the same value.

It writes with the core schema's resolvers (``spool.yaml.schema``), so a string that would read back
as anything else is quoted, and also quotes what a YAML 1.1 reader would misread (``on``, dates).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator, Mapping
from typing import Any

import yaml

from spool.base.errors import InvalidJob
from spool.yaml.plain import NotPlain, Plain
from spool.yaml.schema import CORE_SCHEMA, MAX_DEPTH, STR, YAML11

__all__ = ["dump_yaml"]


class _Representer(yaml.representer.SafeRepresenter):
    """SafeRepresenter that makes only what ``load_yaml`` reads back to the same value."""

    _depth = 0

    def resolve(self, kind: type[yaml.Node], value: Any, implicit: tuple[bool, bool]) -> str:
        # Asked twice per scalar by both serializers; upstream's answer without its per-call
        # list building and path-resolver walk (the tables have neither wildcards nor paths).
        if kind is not yaml.ScalarNode:
            return super().resolve(kind, value, implicit)  # type: ignore[misc]
        if implicit[0]:
            for tag, pattern in _RESOLVERS_BY_FIRST.get(value[:1], ()):
                if pattern.match(value):
                    return tag
        return STR

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
        return self.represent_scalar(STR, str.__str__(data), style=style)

    def represent_unsupported(self, data: object) -> yaml.Node:
        raise TypeError(f"dump_yaml cannot write a {type(data).__name__}")


_ODD_BREAKS = re.compile("[\x85\u2028\u2029]")


class _Dumper(_Representer, yaml.SafeDumper):
    """PyYAML's pure-Python serializer and emitter: the reference, and the path without libyaml."""


_Dumper.yaml_implicit_resolvers = {}
_Dumper.yaml_representers = {}
_Dumper.yaml_multi_representers = {}
for _tag, _pattern, _first in CORE_SCHEMA:
    _Dumper.add_implicit_resolver(_tag, _pattern, _first)
# After the core schema, so a real int or bool still matches its own tag first.
for _first_char, _entries in yaml.resolver.Resolver.yaml_implicit_resolvers.items():
    for _tag, _pattern in _entries:
        _Dumper.add_implicit_resolver(YAML11, _pattern, [_first_char])
_Dumper.add_implicit_resolver(YAML11, re.compile(r"(?:y|Y|n|N)\Z"), list("yYnN"))
assert None not in _Dumper.yaml_implicit_resolvers and not _Dumper.yaml_path_resolvers
_RESOLVERS_BY_FIRST: dict[str, list[tuple[str, re.Pattern[str]]]] = _Dumper.yaml_implicit_resolvers


def _joined(patterns: list[re.Pattern[str]]) -> re.Pattern[str]:
    """One pattern that matches (at the start) where any of ``patterns`` does, each with its flags."""
    return re.compile("|".join(f"(?{'x' if p.flags & re.VERBOSE else ''}:{p.pattern})" for p in patterns))


class _JoinedOnFirstUse(Mapping[str, re.Pattern[str]]):
    """``_RESOLVERS_BY_FIRST`` joined per first character, each compiled when first asked for:
    compiling all of them cost ~2 ms of every process's start-up (a ``spool submit`` asks 2-4)."""

    def __init__(self, entries: Mapping[str, list[tuple[str, re.Pattern[str]]]]) -> None:
        self._entries = entries
        self._joined: dict[str, re.Pattern[str]] = {}

    def __getitem__(self, first: str) -> re.Pattern[str]:
        found = self._joined.get(first)
        if found is None:
            found = self._joined[first] = _joined([p for _tag, p in self._entries[first]])
        return found

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)


# Job files without the emitters where they are plain enough (spool.yaml.plain), over the same table.
PLAIN = Plain(_JoinedOnFirstUse(_RESOLVERS_BY_FIRST))

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

# libyaml's emitter, fed the same nodes with the same resolvers (CEmitter asks ``resolve`` which
# scalars need quotes, as the pure serializer does): ~4x faster, and byte for byte the same output
# where it is used. The two emitters differ (tests/unit/test_yaml_differential.py) in how they fold
# a long double-quoted string, in characters past U+FFFF (libyaml escapes them), and in a ``...``
# libyaml adds after a ``|+`` block; a document with any string that may come out double-quoted or
# as ``|+`` is written by the pure emitter instead (none of a job file's own fields is one).
_FastDumper: type[yaml.SafeDumper | yaml.CSafeDumper] = _Dumper


class _NotForLibyaml(Exception):
    """This document may come out of libyaml's emitter other than out of PyYAML's."""


# Plain, single-quoted or a `|`/`|-` block in both: no tab, CR, control, BOM, NEL, LS, PS,
# surrogate or character past U+FFFF; no space before a line break or at the end of a multi-line
# string; at most one final line break.
@functools.cache
def _same_in_both_chars() -> re.Pattern[str]:
    """Compiled at first use (a document the plain writer can't take): ~1.6 ms of start-up otherwise."""
    return re.compile("[\n\x20-\x7e\xa0-\u2027\u202a-\ud7ff\ue000-\ufefe\uff00-\ufffd]*")


def _same_in_both(text: str) -> bool:
    if not _same_in_both_chars().fullmatch(text):
        return False
    return "\n" not in text or not (" \n" in text or text.endswith((" ", "\n\n")))


if yaml.__with_libyaml__:

    class _LibyamlDumper(_Representer, yaml.CSafeDumper):
        """``_Dumper``'s tables over libyaml's emitter, refusing what it would write otherwise."""

        def represent_text(self, data: str) -> yaml.Node:
            if not _same_in_both(data):
                raise _NotForLibyaml
            return super().represent_text(data)

        def represent_keyed(self, data: dict[Any, Any]) -> yaml.Node:
            # A key is a simple key (`k: v`) below 128 characters in one, 128 bytes in the other,
            # and never when empty in PyYAML's; one with a line break is double-quoted.
            if any(
                isinstance(key, str) and not (0 < len(key) <= 60 and key.isascii() and "\n" not in key) for key in data
            ):
                raise _NotForLibyaml
            return self.represent_dict(data)

    _LibyamlDumper.yaml_implicit_resolvers = _Dumper.yaml_implicit_resolvers
    _LibyamlDumper.yaml_representers = dict(_Dumper.yaml_representers)
    _LibyamlDumper.yaml_multi_representers = dict(_Dumper.yaml_multi_representers)
    _LibyamlDumper.add_representer(str, _LibyamlDumper.represent_text)
    _LibyamlDumper.add_multi_representer(str, _LibyamlDumper.represent_text)
    _LibyamlDumper.add_representer(dict, _LibyamlDumper.represent_keyed)
    _FastDumper = _LibyamlDumper


def dump_yaml(obj: object) -> bytes:
    """Write ``obj`` (JSON-like values, tuples as lists) as block-style UTF-8 YAML.

    Raises ``InvalidJob`` past ``MAX_DEPTH`` levels of nesting and ``TypeError`` for other types.
    A mapping of plain scalars (a job file's runner part, its spec most often) is written by
    ``spool.yaml.plain`` as the emitters would write it, without them.
    """
    try:
        return PLAIN.dump(obj)
    except NotPlain:
        pass
    if isinstance(obj, (dict, list)):  # a bare scalar: libyaml leaves out the `...` after it
        try:
            out = _dump_with(_FastDumper, obj)
            if not out.endswith(b"\n...\n"):
                return out
        except _NotForLibyaml:
            pass
    return _dump_with(_Dumper, obj)


def _dump_with(dumper: type[yaml.SafeDumper | yaml.CSafeDumper], obj: object) -> bytes:
    out = yaml.dump(
        obj,
        Dumper=dumper,
        default_flow_style=False,
        sort_keys=False,
        allow_unicode=True,
        encoding="utf-8",
    )
    assert isinstance(out, bytes)
    return out
