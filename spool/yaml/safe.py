"""The only way spool reads or writes YAML: job files and ``config.yaml`` are untrusted input.

``load_yaml`` caps the size before parsing, decodes strict UTF-8, parses into values straight
from parser events and refuses anchors, aliases, explicit tags and duplicate keys, stops at 32
levels of nesting, and resolves plain scalars by YAML 1.2's core schema (no yes/no booleans, no
octal ``0123``, no implicit dates). It returns only dict, list, str, int, float, bool and None;
every failure is one ``InvalidJob`` line that starts with the source and says what and where.
A document as spool writes it (plain scalars: every job file) is read by ``spool.yaml.plain``
without PyYAML; any other by ``spool.yaml.parse``: events from libyaml where the document allows
it and from PyYAML's pure-Python parser, the reference, otherwise and on any error; never from a
composer (``CSafeLoader``'s recurses on the C stack: it segfaulted on 60 KB of nested ``[``).

``dump_yaml`` (``spool.yaml.dump``) writes block style with the same resolvers, so a string that
would read back as anything else is quoted, and also quotes what a YAML 1.1 reader would misread.
"""

from __future__ import annotations

from spool.base.errors import InvalidJob
from spool.yaml.dump import PLAIN, dump_yaml
from spool.yaml.plain import NotPlain
from spool.yaml.schema import MAX_DEPTH

__all__ = ["MAX_DEPTH", "dump_yaml", "load_yaml"]


def load_yaml(data: bytes, *, max_bytes: int, source: str) -> object:
    """Parse one untrusted YAML document into dict/list/str/int/float/bool/None values.

    Raises ``InvalidJob`` (``"<source>: <what> at line L, column C"``) for anything refused.
    """
    if len(data) > max_bytes:
        raise InvalidJob(f"{source}: {len(data)} bytes is over the limit of {max_bytes}")
    try:
        return PLAIN.load(data)  # a file as spool writes it, most often
    except NotPlain:
        pass
    from spool.yaml import parse  # start-up: PyYAML (~9 ms) only for a document the plain reader can't take

    return parse.load(data, source=source)
