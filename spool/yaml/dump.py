"""``dump_yaml``: block-style YAML that ``spool.yaml.safe.load_yaml`` reads back to the same value.

A document of plain scalars (every job file) is written by ``spool.yaml.plain`` without an
emitter and without importing PyYAML; any other goes to the emitters (``spool.yaml.emit``), which
write the same bytes for the plain ones (tests/unit/test_yaml_plain.py). Both quote a string that
the core schema would read back as anything else, and what a YAML 1.1 reader would misread
(``on``, dates: ``spool.yaml.schema.YAML11_READINGS``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping

from spool.yaml.plain import NotPlain, Plain
from spool.yaml.schema import RESOLVERS_BY_FIRST, ResolverList

__all__ = ["PLAIN", "dump_yaml"]


def _joined(patterns: list[re.Pattern[str]]) -> re.Pattern[str]:
    """One pattern that matches (at the start) where any of ``patterns`` does (none has flags)."""
    return re.compile("|".join(f"(?:{p.pattern})" for p in patterns))


class _JoinedOnFirstUse(Mapping[str, re.Pattern[str]]):
    """``RESOLVERS_BY_FIRST`` joined per first character, each compiled when first asked for:
    compiling all of them cost ~2 ms of every process's start-up (a ``spool submit`` asks 2-4)."""

    def __init__(self, entries: Mapping[str, ResolverList]) -> None:
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
PLAIN = Plain(_JoinedOnFirstUse(RESOLVERS_BY_FIRST))


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
    from spool.yaml import emit  # start-up: PyYAML (~9 ms) only for a document the plain writer can't take

    return emit.dump(obj)
