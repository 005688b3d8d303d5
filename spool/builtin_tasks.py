"""The handlers every worker has without ``--import``: ``wordcount``, the seed's test job.

``BUILTIN`` is what ``spool.registry`` starts its table with; this module imports nothing of
spool's, so the registry can import it at its top.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# Read in pieces so a large file costs a bounded amount of memory.
_CHUNK_CHARS = 1 << 20


def wordcount(path: str) -> dict[str, int]:
    """``{"words": N}``: whitespace-separated words in the file at ``path``, read as UTF-8.

    Undecodable bytes become U+FFFD, so a binary file still gets a count rather than a failure.
    """
    if not isinstance(path, str):
        raise TypeError(f"wordcount: path must be a string, got {type(path).__name__}")
    words = 0
    # Whether the previous piece ended inside a word: a word cut by a piece boundary is
    # counted in both pieces, so it is taken back once.
    in_word = False
    with open(path, encoding="utf-8", errors="replace") as f:
        while piece := f.read(_CHUNK_CHARS):
            words += len(piece.split())
            if in_word and not piece[0].isspace():
                words -= 1
            in_word = not piece[-1].isspace()
    return {"words": words}


# task name -> handler, registered before any user module is imported.
BUILTIN: dict[str, Callable[..., Any]] = {"wordcount": wordcount}
