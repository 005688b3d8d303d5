"""Job ids: generated, time-sortable, and safe as file names.

An id is a ULID: 48 bits of milliseconds since the epoch and 80 random bits in Crockford base32,
26 characters, so `ls` lists jobs in submission order. Ids made in one process in the same
millisecond stay increasing. Any id spool accepts from outside matches ``ID_PATTERN``, which
admits no `/`, `.`, NUL or leading dash, so an id can never traverse out of its folder.
"""

from __future__ import annotations

import os
import re
import threading
from typing import TypeGuard

from spool.base.clock import SYSTEM, Clock

ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_GENERATED = re.compile(f"[{_ALPHABET}]{{26}}")
_lock = threading.Lock()
_last = (0, 0)


def _forget_after_fork() -> None:
    """A forked child starts its own sequence. Inherited, ``_last`` would give every child of one
    parent the same next id within the parent's last millisecond (or, after a fake or stepped-back
    clock put it ahead, for as long as real time is behind it): two processes, one id."""
    global _lock, _last
    _lock, _last = threading.Lock(), (0, 0)


os.register_at_fork(after_in_child=_forget_after_fork)


def is_valid_id(text: object) -> TypeGuard[str]:
    return isinstance(text, str) and ID_PATTERN.fullmatch(text) is not None


def is_generated_id(text: object) -> bool:
    """An id ``new_id`` could have made. In pending/ only such names are jobs: a user's drop
    named ``invoice.yaml`` is a drop to ingest under a new id, never a job called ``invoice``."""
    return isinstance(text, str) and _GENERATED.fullmatch(text) is not None


def new_id(clock: Clock = SYSTEM) -> str:
    """A fresh ULID, strictly greater than the previous one made by this process; its time part
    is ``clock``'s wall time."""
    global _last
    with _lock:
        millis = int(clock.wall() * 1000)
        last_millis, last_random = _last
        if millis <= last_millis:
            millis, randomness = last_millis, last_random + 1
        else:
            randomness = int.from_bytes(os.urandom(10), "big") >> 1  # room to increment
        _last = (millis, randomness)
    value = (millis << 80) | randomness
    return "".join(_ALPHABET[(value >> shift) & 31] for shift in range(125, -1, -5))
