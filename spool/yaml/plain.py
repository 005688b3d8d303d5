"""``plain_yaml``: the emitters' bytes for the plainest documents, written without an emitter.

A job file is a mapping of a few dozen scalars: ids, names, counts, times, ``null``. For such a
document ``dump_yaml`` spends ~60 us per call in PyYAML's representer and libyaml's emitter; the
text they write is fixed by rules simple enough to state here, and this writes it in a few us.

The rules, for what this module takes and nothing else (anything else raises ``NotPlain`` and
the caller uses the emitters, the reference):

- a top-level ``dict`` with ``str`` keys; values ``None`` (``null``), ``bool``, ``int``,
  ``float`` whose ``repr`` has a ``.`` and no exponent, ``str`` made of ``[A-Za-z0-9_./+:-]``
  starting with a letter, digit, ``_`` or ``/`` and not ending with ``:`` (no space, quote, indicator
  or line break: nothing the emitter folds, escapes or splits), ``dict`` and ``list``/``tuple``;
- such a string is written plain when the resolvers read it back as a string (the emitter asks
  the same table, ``resolvers``: ``spool.yaml.dump``'s), else in single quotes (a time, ``on``,
  ``1.5`` as text...);
- block style with an indent of 2: a nested mapping two columns in, a sequence's ``- `` at its
  key's column (PyYAML's indentless sequences), ``{}`` and ``[]`` for empty ones; a sequence in
  a sequence is left to the emitters, and so is nesting past ``MAX_NEST`` levels.

tests/unit/test_yaml_plain.py holds it to ``spool.yaml.dump``'s emitters byte for byte.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

Resolvers = Mapping[str, Sequence[tuple[str, re.Pattern[str]]]]  # first character -> (tag, pattern)

__all__ = ["NotPlain", "plain_yaml"]

MAX_NEST = 6  # deeper documents go to the emitters (which also enforce MAX_DEPTH)

_WORD = re.compile(r"[A-Za-z0-9_/][A-Za-z0-9_./+:-]*")


class NotPlain(Exception):
    """The value is not one this module writes; the emitters must."""


def plain_yaml(obj: object, resolvers: Resolvers) -> bytes:
    """``obj`` as ``dump_yaml`` writes it, or ``NotPlain``. ``resolvers``: the emitter's implicit
    resolvers by first character (which plain strings would read back as something else)."""
    if type(obj) is not dict or not obj:
        raise NotPlain
    out: list[str] = []
    _Writer(resolvers, out).mapping(obj, 0, "", 0)
    return "".join(out).encode("ascii")


class _Writer:
    def __init__(self, resolvers: Resolvers, out: list[str]) -> None:
        self.resolvers = resolvers
        self.out = out

    def mapping(self, obj: dict[Any, Any], indent: int, lead: str, depth: int) -> None:
        """Each entry on its line at ``indent``; the first one after ``lead`` (``- `` in a sequence)."""
        if depth >= MAX_NEST:
            raise NotPlain
        out, pad, prefix = self.out, " " * indent, lead
        for key, value in obj.items():
            if type(key) is not str or len(key) > 60 or self.word(key) != key:
                raise NotPlain  # a key that needs quotes, or is too long for a simple key
            kind = type(value)
            if kind is dict:
                if value:
                    out.append(f"{prefix}{key}:\n")
                    self.mapping(value, indent + 2, " " * (indent + 2), depth + 1)
                else:
                    out.append(f"{prefix}{key}: {{}}\n")
            elif kind is list or kind is tuple:
                if value:
                    out.append(f"{prefix}{key}:\n")
                    self.sequence(value, indent, depth + 1)
                else:
                    out.append(f"{prefix}{key}: []\n")
            else:
                out.append(f"{prefix}{key}: {self.scalar(value)}\n")
            prefix = pad

    def sequence(self, items: list[Any] | tuple[Any, ...], indent: int, depth: int) -> None:
        if depth >= MAX_NEST:
            raise NotPlain
        pad = " " * indent
        for item in items:
            kind = type(item)
            if kind is dict:
                if item:
                    self.mapping(item, indent + 2, pad + "- ", depth + 1)
                else:
                    self.out.append(f"{pad}- {{}}\n")
            elif kind is list or kind is tuple:
                raise NotPlain
            else:
                self.out.append(f"{pad}- {self.scalar(item)}\n")

    def scalar(self, value: object) -> str:
        if value is None:
            return "null"
        if value is True:
            return "true"
        if value is False:
            return "false"
        kind = type(value)
        if kind is int:
            return str(value)
        if kind is float:
            text = repr(value)
            if "." in text and "e" not in text and "n" not in text:  # not 1e+16, inf, nan
                return text
            raise NotPlain
        if kind is str:
            assert isinstance(value, str)
            word = self.word(value)
            return word if word is not None else f"'{value}'"
        raise NotPlain

    def word(self, text: str) -> str | None:
        """``text`` itself when it is written plain, None when in single quotes; NotPlain when it
        is neither kind of string this module writes."""
        if not _WORD.fullmatch(text) or text.endswith(":"):
            raise NotPlain
        for _tag, pattern in self.resolvers.get(text[:1], ()):
            if pattern.match(text):
                return None  # reads back as something else (a time, a number, a bool): quoted
        return text
