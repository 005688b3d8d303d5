"""The emitters behind ``dump_yaml`` (``spool.yaml.dump``): PyYAML's, and libyaml's where it writes
the same bytes, for a document the plain writer does not take. Imported on first such document:
PyYAML costs ~9 ms of a process's start-up that a ``spool submit`` never needs.

It writes with the core schema's resolvers (``spool.yaml.schema``), so a string that would read back
as anything else is quoted, and also quotes what a YAML 1.1 reader would misread (``on``, dates).
"""

from __future__ import annotations

import functools
import re
from typing import Any

import yaml

from spool.base.errors import InvalidJob
from spool.yaml.schema import MAX_DEPTH, RESOLVERS_BY_FIRST, STR

__all__ = ["dump"]


class _Representer(yaml.representer.SafeRepresenter):
    """SafeRepresenter that makes only what ``load_yaml`` reads back to the same value."""

    _depth = 0

    def resolve(self, kind: type[yaml.Node], value: Any, implicit: tuple[bool, bool]) -> str:
        # Asked twice per scalar by both serializers; upstream's answer without its per-call
        # list building and path-resolver walk (the tables have neither wildcards nor paths).
        if kind is not yaml.ScalarNode:
            return super().resolve(kind, value, implicit)  # type: ignore[misc]
        if implicit[0]:
            for tag, pattern in RESOLVERS_BY_FIRST.get(value[:1], ()):
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


_Dumper.yaml_implicit_resolvers = RESOLVERS_BY_FIRST  # the plain writer's table (spool.yaml.dump)
_Dumper.yaml_representers = {}
_Dumper.yaml_multi_representers = {}
assert not _Dumper.yaml_path_resolvers
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


def dump(obj: object) -> bytes:
    """``obj`` as ``dump_yaml`` writes what the plain writer does not take (``spool.yaml.dump``)."""
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
