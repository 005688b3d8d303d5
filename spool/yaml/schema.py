"""The YAML schema spool reads and writes: YAML 1.2's core schema for plain scalars, and the depth cap.

``spool.yaml.safe`` (reading) and ``spool.yaml.dump`` (writing) share these tables, so a string the
writer leaves plain is one the reader reads back as that string.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable

MAX_DEPTH = 32

ResolverList = list[tuple[str, re.Pattern[str]]]  # (tag, pattern), in the order they are tried

NULL = "tag:yaml.org,2002:null"
BOOL = "tag:yaml.org,2002:bool"
INT = "tag:yaml.org,2002:int"
FLOAT = "tag:yaml.org,2002:float"
STR = "tag:yaml.org,2002:str"
# Any tag but str makes the dumper quote a string; this one marks YAML 1.1 readings.
YAML11 = "tag:spool,2026:yaml11-trap"

# YAML 1.2 core schema (tag, pattern, first characters). ``\Z``, not ``$``: ``$`` also matches
# before a final newline. int is listed before float so "123" is an int.
CORE_SCHEMA: list[tuple[str, re.Pattern[str], list[str]]] = [
    (NULL, re.compile(r"(?:~|null|Null|NULL|)\Z"), ["~", "n", "N", ""]),
    (BOOL, re.compile(r"(?:true|True|TRUE|false|False|FALSE)\Z"), list("tTfF")),
    (INT, re.compile(r"(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)\Z"), list("-+0123456789")),
    (
        FLOAT,
        re.compile(
            r"(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
            r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))\Z"
        ),
        list("-+.0123456789"),
    ),
]


def to_int(text: str) -> int:
    if text.startswith(("0o", "0x")):
        return int(text, 0)
    return int(text, 10)  # base 10 even with leading zeros: 0123 is 123, never octal


def to_float(text: str) -> float:
    if text[-1] in "fF":
        return -math.inf if text[0] == "-" else math.inf
    if text[-1] in "nN":
        return math.nan
    return float(text)


CONVERT: dict[str, Callable[[str], object]] = {
    NULL: lambda text: None,
    BOOL: lambda text: text[0] in "tT",
    INT: to_int,
    FLOAT: to_float,
}


# What a YAML 1.1 reader (PyYAML's ``safe_load``, say) reads as something other than a string,
# after YAML 1.1's type definitions (yaml.org/type: bool, int, float, timestamp, merge, value;
# its null is the core schema's), each written a little wider than its definition: the writer
# quotes any string one of these matches, and quoting one string more than needed changes nothing
# a reader gets back.
# Matched at the start (``re.match``); tests/unit/test_yaml_plain.py holds them to PyYAML's own
# resolvers (every string those read otherwise is caught here). Tagged ``YAML11``: quote it.
YAML11_READINGS: list[tuple[re.Pattern[str], str]] = [
    (
        re.compile(r"(?:y|Y|yes|Yes|YES|n|N|no|No|NO|true|True|TRUE|false|False|FALSE|on|On|ON|off|Off|OFF)\Z"),
        "yYnNtTfFoO",
    ),
    # Decimal ints and floats, `_` anywhere, any dots, an exponent; octal is a decimal's look-alike.
    (re.compile(r"[-+]?(?:[0-9]|\.[0-9_])[0-9_.]*(?:[eE][-+]?[0-9]+)?\Z"), "-+.0123456789"),
    (re.compile(r"[-+]?0[bx][0-9a-fA-F_]+\Z"), "-+0"),  # binary and hexadecimal
    (re.compile(r"[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?\Z"), "-+0123456789"),  # base 60
    (re.compile(r"(?:[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))\Z"), "-+."),
    (re.compile(r"[0-9][0-9][0-9][0-9]-[0-9][0-9]?-[0-9][0-9]?(?:\Z|[Tt \t])"), "0123456789"),  # a date, a time
    (re.compile(r"(?:<<|=)\Z"), "<="),  # a merge key, a value key
]


def _by_first(entries: Iterable[tuple[str, re.Pattern[str], Iterable[str]]]) -> dict[str, ResolverList]:
    """(tag, pattern, first characters) entries by first character, in the order given."""
    table: dict[str, ResolverList] = {}
    for tag, pattern, firsts in entries:
        for first in firsts:
            table.setdefault(first, []).append((tag, pattern))
    return table


# The reader's table: a plain scalar's core schema resolvers by its first character ("" for the
# empty scalar), what Resolver.resolve looks up without its per-call list building.
CORE_BY_FIRST = _by_first(CORE_SCHEMA)
# The writer's table: the core schema's resolvers first (a real int or bool matches its own tag),
# then the YAML 1.1 readings.
RESOLVERS_BY_FIRST = _by_first([*CORE_SCHEMA, *((YAML11, pattern, chars) for pattern, chars in YAML11_READINGS)])
