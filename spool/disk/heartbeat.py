"""What a heartbeat file (``leased/.<id>.<attempt>.hb``, named by ``spool.disk.layout``) holds:
a counter the coordinator watches change, the worker that beats, and the handler's progress.

    "<counter> <worker>[ queued]\n"          written at the claim (counter 0), then at each beat
    "<progress as one JSON line>\n"          only when the handler reported progress (spool.progress)
"""

from __future__ import annotations

HEARTBEAT_MAX_BYTES = 4096  # a counter, a worker name (<= 64) and a progress line (spool.progress)


def heartbeat_content(counter: int, worker: str, progress: bytes = b"", *, queued: bool = False) -> bytes:
    """What a heartbeat file holds: a first line with the counter the coordinator watches change
    and the worker (so the coordinator can check its liveness lock without reading the job file),
    ending in `` queued`` for a batch member whose handler has not started (``store.queued_beat``),
    then, when the handler reported one, a second line with its progress (``spool.progress``)."""
    first = f"{counter} {worker}{' queued' if queued else ''}\n".encode()
    return first + progress + b"\n" if progress else first


def heartbeat_lines(content: bytes) -> tuple[bytes, bytes | None]:
    """(the counter's line, the progress line or None). The coordinator compares the first only,
    so a rewritten progress line is never a beat; without a newline (an older file, a torn read)
    the whole content is the first."""
    first, newline, rest = content.partition(b"\n")
    return first + newline, rest.rstrip(b"\n") or None


def parse_heartbeat(content: bytes | None) -> tuple[int, str] | None:
    """(counter, worker) from a heartbeat file's content; None when it is not one a worker wrote
    (a planted entry read as nothing, a beat caught while being rewritten)."""
    parts = heartbeat_lines(content or b"")[0].split()
    if len(parts) not in (2, 3) or not parts[0].isdigit() or parts[2:] not in ([], [b"queued"]):
        return None
    return int(parts[0]), parts[1].decode("utf-8", "replace")
