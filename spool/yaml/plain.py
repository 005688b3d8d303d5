"""``Plain``: the emitters' bytes for the plainest documents, written without an emitter, and
such bytes read back (proved by writing them again).

A job file is a mapping of a few dozen scalars: ids, names, counts, times, ``null``. For such a
document ``dump_yaml`` spends ~60 us per call in PyYAML's representer and libyaml's emitter; the
text they write is fixed by rules simple enough to state here, and this writes it in a few us.

The rules, for what this module takes and nothing else (anything else raises ``NotPlain`` and
the caller uses the emitters, the reference):

- a top-level ``dict`` with ``str`` keys; values ``None`` (``null``), ``bool``, ``int``,
  ``float`` whose ``repr`` has a ``.`` and no exponent, ``str`` made of ``[A-Za-z0-9_./+:-]``
  starting with a letter, digit, ``_`` or ``/`` and not ending with ``:`` (no space, quote,
  indicator or line break: nothing the emitter folds, escapes or splits), ``dict``, ``list``, ``tuple``;
- such a string is written plain when the resolvers read it back as a string (the emitter asks
  the same table, ``Plain.traps``), else in single quotes (a time, ``on``, ``1.5`` as text...);
  a key too (``'n': 1``: ``n`` is a YAML 1.1 boolean);
- a value may also be such words joined by single spaces, none of them ending with ``:`` (so no
  ``: ``), when its line fits in the emitter's width (``WIDTH`` columns: past it the emitter
  folds a spaced string onto the next line);
- block style with an indent of 2: a nested mapping two columns in, a sequence's ``- `` at its
  key's column (PyYAML's indentless sequences), ``{}`` and ``[]`` for empty ones; a sequence in
  a sequence is left to the emitters, and so is nesting past ``MAX_NEST`` levels.

``Plain.load`` reads such bytes back and proves its reading by writing it again (its docstring
says why that is enough on untrusted input). tests/unit/test_yaml_plain.py holds the writer to
``spool.yaml.dump``'s emitters byte for byte, and the reader to the pure-Python parser.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

Traps = Mapping[str, re.Pattern[str]]  # first character -> the plain strings that read back otherwise

__all__ = ["NotPlain", "Plain"]

MAX_NEST = 6  # deeper documents go to the emitters (which also enforce MAX_DEPTH)

_WORD = re.compile(r"[A-Za-z0-9_/][A-Za-z0-9_./+:-]*")
_PHRASE = re.compile(r"[A-Za-z0-9_/][A-Za-z0-9_./+:-]*(?: [A-Za-z0-9_./+:-]+)+")
WIDTH = 80  # the emitters' best_width: a spaced scalar whose line would pass it is folded


_UNKNOWN = object()


class NotPlain(Exception):
    """The value is not one this module writes; the emitters must."""


class Plain:
    """The plain writer and reader over one table of ``traps``: by first character, one pattern
    joining the emitter's implicit resolvers (a plain string it matches reads back as something
    else: ``spool.yaml.dump`` builds the one spool uses)."""

    def __init__(self, traps: Traps) -> None:
        self.traps = traps
        self.verdicts: dict[str, str | None] = {}  # word -> itself, or None when it is quoted
        self.keys: dict[str, str] = {}  # a key -> as written (``_Writer.key``)

    def dump(self, obj: object) -> bytes:
        """``obj`` as ``dump_yaml`` writes it, or ``NotPlain``."""
        if type(obj) is not dict or not obj:
            raise NotPlain
        out: list[str] = []
        _Writer(self, out).mapping(obj, 0, "", 0)
        return "".join(out).encode("ascii")

    def load(self, data: bytes) -> dict[str, Any]:
        """The value ``dump`` would have written as ``data``, or ``NotPlain``.

        A reading of the lines by the rules above, then proved: the value is written again and
        must give ``data`` byte for byte. ``dump``'s bytes are the emitters' (tested), and what
        the emitters write ``load_yaml`` reads back to the same value (``dump_yaml``'s contract,
        tested), so for such bytes the value *is* what ``load_yaml`` would return; any other
        document (a comment, other spacing, a tag, a duplicate key, a scalar read otherwise)
        fails the proof and goes to the parsers.
        """
        try:
            text = data.decode("ascii")
        except UnicodeDecodeError:
            raise NotPlain from None
        if not text.endswith("\n"):
            raise NotPlain
        reader = _Reader(text[:-1].split("\n"))
        value = reader.mapping(0, 0)
        if reader.at != len(reader.lines) or self.dump(value) != data:
            raise NotPlain
        return value

    def word(self, text: str) -> str | None:
        """``text`` itself when it is written plain, None when in single quotes; NotPlain when it
        is neither kind of string this module writes."""
        known = self.verdicts.get(text, _UNKNOWN)
        if known is not _UNKNOWN:
            return known  # type: ignore[return-value]
        if not _WORD.fullmatch(text) or text.endswith(":"):
            raise NotPlain
        verdict = None if self._reads_back_otherwise(text) else text
        if len(text) <= 40 and len(self.verdicts) < 4096:  # keys, names, states: few, seen again and again
            self.verdicts[text] = verdict
        return verdict

    def phrase(self, text: str, column: int) -> str:
        """``text`` (words and single spaces) as written in a value at ``column``, plain or in
        single quotes; NotPlain when the emitter would write it otherwise (an indicator, or a
        line past ``WIDTH``, which it folds)."""
        if len(text) + column + 2 > WIDTH or not _PHRASE.fullmatch(text) or ": " in text or text.endswith(":"):
            raise NotPlain
        return f"'{text}'" if self._reads_back_otherwise(text) else text

    def _reads_back_otherwise(self, text: str) -> bool:
        """Whether a resolver reads ``text``, written plain, as something else than this string."""
        traps = self.traps.get(text[:1])
        return traps is not None and traps.match(text) is not None


class _Writer:
    def __init__(self, plain: Plain, out: list[str]) -> None:
        self.word = plain.word
        self.phrase = plain.phrase
        self.keys = plain.keys
        self.out = out

    def mapping(self, obj: dict[Any, Any], indent: int, lead: str, depth: int) -> None:
        """Each entry on its line at ``indent``; the first one after ``lead`` (``- `` in a sequence)."""
        if depth >= MAX_NEST:
            raise NotPlain
        out, pad, prefix, keys, word = self.out, " " * indent, lead, self.keys, self.word
        for key, value in obj.items():
            if type(key) is not str:
                raise NotPlain
            written = keys.get(key) or self.key(key)
            kind = type(value)
            if kind is str and " " not in value:  # the scalars of a job file, most of them: inline
                plain = word(value)
                out.append(f"{prefix}{written}: {value}\n" if plain is not None else f"{prefix}{written}: '{value}'\n")
            elif kind is int:
                out.append(f"{prefix}{written}: {value}\n")
            elif kind is dict:
                if value:
                    out.append(f"{prefix}{written}:\n")
                    self.mapping(value, indent + 2, " " * (indent + 2), depth + 1)
                else:
                    out.append(f"{prefix}{written}: {{}}\n")
            elif kind is list or kind is tuple:
                if value:
                    out.append(f"{prefix}{written}:\n")
                    self.sequence(value, indent, depth + 1)
                else:
                    out.append(f"{prefix}{written}: []\n")
            else:
                out.append(f"{prefix}{written}: {self.scalar(value, len(prefix) + len(written) + 2)}\n")
            prefix = pad

    def key(self, key: str) -> str:
        """``key`` as written: itself, or in single quotes when it reads back as something else
        plain (``n``, ``1``), as the emitter writes it; kept in ``keys`` (a job file's few names)."""
        if len(key) > 60:
            raise NotPlain  # too long for a simple key
        written = key if self.word(key) is not None else f"'{key}'"
        if len(self.keys) < 4096:
            self.keys[key] = written
        return written

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
                self.out.append(f"{pad}- {self.scalar(item, indent + 2)}\n")

    def scalar(self, value: object, column: int) -> str:
        """``value`` as written from ``column`` on."""
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
            if " " in value:
                return self.phrase(value, column)
            word = self.word(value)
            return word if word is not None else f"'{value}'"
        raise NotPlain


# -- reading it back -------------------------------------------------------------------------------

_INT = re.compile(r"-?[0-9]+")
_FLOAT = re.compile(r"-?[0-9]+\.[0-9]*")
_WORDS = {"null": None, "true": True, "false": False}
_NUMBER_STARTS = frozenset("-0123456789")  # how _INT's and _FLOAT's matches start: no regex for the rest


class _Reader:
    def __init__(self, lines: list[str]) -> None:
        self.lines = lines
        self.at = 0

    def mapping(self, indent: int, depth: int) -> dict[str, Any]:
        """The entries on the lines at ``indent`` from here (at least one)."""
        if depth >= MAX_NEST:
            raise NotPlain
        out: dict[str, Any] = {}
        lines, pad = self.lines, " " * indent
        while self.at < len(lines):
            line = lines[self.at]
            if not line.startswith(pad) or line[indent : indent + 1] in (" ", "-", ""):
                break
            self.at += 1
            entry = line[indent:]
            if entry.endswith(":"):  # a nested block follows: a mapping 2 in or a sequence here
                key = _unquoted(entry[:-1])
                following = lines[self.at] if self.at < len(lines) else ""
                if following.startswith(pad + "- "):
                    out[key] = self.sequence(indent, depth + 1)
                else:
                    out[key] = self.mapping(indent + 2, depth + 1)
            else:
                key, sep, rest = entry.partition(": ")
                if not sep:
                    raise NotPlain
                out[_unquoted(key)] = {} if rest == "{}" else [] if rest == "[]" else _scalar(rest)
        if not out:
            raise NotPlain
        return out

    def sequence(self, indent: int, depth: int) -> list[Any]:
        if depth >= MAX_NEST:
            raise NotPlain
        out: list[Any] = []
        lines, lead = self.lines, " " * indent + "- "
        while self.at < len(lines) and lines[self.at].startswith(lead):
            item = lines[self.at][len(lead) :]
            if item == "{}":
                self.at += 1
                out.append({})
            elif ": " in item or item.endswith(":"):  # a mapping whose first entry is on this line
                lines[self.at] = " " * (indent + 2) + item
                out.append(self.mapping(indent + 2, depth + 1))
            else:
                self.at += 1
                out.append(_scalar(item))
        return out


def _unquoted(text: str) -> str:
    """A string (a key, or a value) as the writer meant it: a quoted one without its quotes (the
    proof checks it)."""
    return text[1:-1] if len(text) > 1 and text[0] == "'" == text[-1] else text


def _scalar(text: str) -> object:
    """What the writer meant by ``text`` (the proof in ``Plain.load`` checks it)."""
    if text in _WORDS:
        return _WORDS[text]
    if text[:1] in _NUMBER_STARTS and len(text) <= 100:  # longer: int() may refuse (max_str_digits)
        if _INT.fullmatch(text):
            return int(text)
        if _FLOAT.fullmatch(text):
            return float(text)
    return _unquoted(text)
