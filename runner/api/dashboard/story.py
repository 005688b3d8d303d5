"""What the job pages show, assembled from the spool: a filter from a query, a job's whole story
(every attempt with its error, the ledger's history, progress, result, logs) and its chain graph.

Everything read from a job is bounded before it reaches a page: a result and each attempt's log
are shown up to ``SHOW_BYTES`` (a log's end, where the failure is).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from spool import queues
from spool.attemptlog import LogReader
from spool.views import Filter, browse
from spool.base.errors import InvalidJob, LedgerError, SpoolError
from spool.disk import fs
from spool.disk import is_valid_id
from spool.job import JobFile
from spool.disk import State, log_name, result_name
from spool.progress import read_progresses
from spool.queues import Hold
from spool.spool import Spool, status_view
from spool.base.timetext import format_time
from spool.workers import WORKER_NAME

SHOW_BYTES = 64 * 1024
LOGS_SHOWN = 10  # the latest attempts' logs (a job requeued often has many; `spool logs` has all)
STATES = tuple(state.value for state in State)
_FIELD_MAX = 200

if TYPE_CHECKING:
    from spool.handle import Handle


def filter_of(query: Mapping[str, str]) -> Filter:
    """The list's filter from a query string (or a form); a value that can't be one is refused."""
    values = {
        name: (query.get(name) or "").strip() or None for name in ("state", "task", "reason", "schedule", "search")
    }
    for name, value in values.items():
        if value is not None and len(value) > _FIELD_MAX:
            raise InvalidJob(f"{name}: at most {_FIELD_MAX} characters")
    if values["state"] is not None and values["state"] not in STATES:
        raise InvalidJob(f"state: one of {', '.join(STATES)}, not {values['state']!r}")
    if values["schedule"] is not None and not WORKER_NAME.fullmatch(values["schedule"]):
        raise InvalidJob(f"schedule: {values['schedule']!r} is not a schedule name")
    return Filter(**values)


def cursor_of(query: Mapping[str, str]) -> str | None:
    before = query.get("before") or None
    if before is not None and not is_valid_id(before):
        raise InvalidJob(f"before: {before!r} is not a job id")
    return before


def filter_fields(f: Filter) -> dict[str, str]:
    return {name: getattr(f, name) or "" for name in ("state", "task", "reason", "schedule", "search")}


# -- how long jobs ran ------------------------------------------------------------------------


def runs_of(sp: Handle, job_ids: list[str]) -> dict[str, dict[str, float | None]]:
    """job id -> its last attempt's start and end (wall times from the ledger's history; ``ended``
    None while that attempt runs or waits for its retry), for the jobs that were ever claimed."""
    try:
        found = browse.runs(sp, job_ids)
    except LedgerError:
        return {}
    return {
        job_id: {"started": started, "ended": ended if ended is not None and ended >= started else None}
        for job_id, started, ended in found
        if started is not None
    }


def duration_text(seconds: float) -> str:
    """350 ms, 4.2 s, 3 min 5 s, 2 h 4 min: what the list's duration column says (and
    ``dashboard.js`` too, for the rows it draws)."""
    if seconds < 1:
        return f"{max(0, round(seconds * 1000))} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    whole = int(seconds)
    if whole < 3600:
        return f"{whole // 60} min {whole % 60} s"
    return f"{whole // 3600} h {whole % 3600 // 60} min"


def run_text(run: Mapping[str, float | None] | None, state: str, now: float) -> str:
    if run is None or run["started"] is None:
        return ""
    if run["ended"] is not None:
        return duration_text(run["ended"] - run["started"])
    return "running " + duration_text(now - run["started"]) if state == "leased" else ""


# -- one job ----------------------------------------------------------------------------------


def job_story(sp: Spool, job_id: str) -> dict[str, Any]:
    """Everything the job's page shows. NotFound for an unknown id, InvalidJob for a bad one."""
    state, job_file = find_job(sp, job_id)
    view = status_view(sp, state, job_file)
    try:
        history = [
            {"at": format_time(at), "event": event, "attempt": attempt, "worker": worker, "detail": detail}
            for at, event, attempt, worker, detail in sp.ledger.history(job_id)
        ]
    except LedgerError:
        history = []
    return {
        "view": view,
        "args": json.dumps(job_file.job.args, indent=2, ensure_ascii=False, sort_keys=True),
        "history": history,
        "progress": progress_of(sp, job_id) if state is State.LEASED else None,
        "result": result_text(sp, job_id) if state is State.DONE else None,
        "logs": [
            {"attempt": n, "text": log_tail(sp, job_id, n)}
            for n in range(job_file.attempt, max(0, job_file.attempt - LOGS_SHOWN), -1)
        ],
        "chain": chain_graph(sp, view),
        "queue": job_file.job.queue,
        "hold": hold_of_job(sp, job_id, job_file.job.queue) if state is State.PENDING else None,
    }


def hold_of_job(sp: Spool, job_id: str, queue: str) -> Hold | None:
    """Which limit of its queue holds a ready pending job back now (None: nothing, or not ready:
    a job waiting for its time or a backoff is not held by a limit, whatever its queue's)."""
    try:
        return queues.hold_of(sp, queue) if browse.ready_pending(sp, job_id) else None
    except LedgerError:
        return None


def progress_of(sp: Spool, job_id: str) -> dict[str, Any] | None:
    """The progress a running handler last reported (spool.progress), or None."""
    return progresses_of(sp, [job_id]).get(job_id)


def progresses_of(sp: Handle, job_ids: list[str]) -> dict[str, dict[str, Any]]:
    """job id -> its progress, for the leased jobs among ``job_ids`` that reported one."""
    if not job_ids:
        return {}
    found = read_progresses(sp, job_ids)  # one listing of leased/ for the page
    return {job_id: _progress_view(value) for job_id, value in found.items() if value is not None}


def _progress_view(value: Any) -> dict[str, Any]:
    fraction = value.fraction
    percent = None if fraction is None else round(100 * fraction)
    return {"fraction": fraction, "percent": percent, "message": value.message}


def result_text(sp: Spool, job_id: str) -> str:
    try:
        data = fs.read_file(sp.layout.fd("results"), result_name(job_id), sp.settings.max_result_bytes + 1024)
    except (FileNotFoundError, SpoolError):
        return ""
    try:
        text = json.dumps(json.loads(data), indent=2, ensure_ascii=False)
    except ValueError:
        text = data.decode("utf-8", "replace")
    return text if len(text) <= SHOW_BYTES else text[:SHOW_BYTES] + "\n... (cut; `spool result` prints it all)"


def log_tail(sp: Spool, job_id: str, attempt: int) -> str | None:
    """The end of one attempt's log (at most SHOW_BYTES), or None when it wrote nothing."""
    reader = LogReader(sp.layout.fd("logs"), log_name(job_id, attempt))
    kept, cut = b"", False
    try:
        for chunk in reader.chunks():
            kept += chunk
            if len(kept) > SHOW_BYTES:
                kept, cut = kept[-SHOW_BYTES:], True
    except OSError:
        return None
    finally:
        reader.close()
    if not kept and not cut:
        return None
    text = kept.decode("utf-8", "replace")
    return ("... (the start is cut; `spool logs` shows it all)\n" + text) if cut else text


# -- the chain graph --------------------------------------------------------------------------


@dataclass(frozen=True)
class Node:
    id: str
    state: str
    task: str
    key: str  # cut to fit the node ("" when the key is the id)
    reason: str  # a dead job's: failed, expired, skipped, cancelled, invalid ("" otherwise)
    x: int
    y: int
    here: bool = False


@dataclass(frozen=True)
class Edge:
    x1: int
    y1: int
    x2: int
    y2: int


NODE_W, NODE_H, GAP_X, GAP_Y = 250, 62, 60, 14
CHAIN_MAX = 60  # jobs drawn; a longer chain says how to see the rest
_KEY_SHOWN = 24


def chain_graph(sp: Handle, view: Mapping[str, Any]) -> dict[str, Any] | None:
    """The whole chain through the job (every ancestor and descendant, ``browse.chain_edges``),
    one column per generation (a job right of all its parents), each node with its task, key,
    state and a dead job's reason; None when the job has neither parents nor children. Drawn as
    SVG by the template, so it needs no script."""
    try:
        edges, cut = browse.chain_edges(sp, view["id"], CHAIN_MAX)
    except LedgerError:
        edges, cut = set(), False
    # The job's own links from its file, for a ledger that has not indexed them yet.
    edges |= {(link["id"], view["id"]) for link in view.get("parents") or ()}
    edges |= {(view["id"], link["id"]) for link in view.get("children") or ()}
    if not edges:
        return None
    ids = sorted({view["id"], *(end for edge in edges for end in edge)})
    try:
        rows = browse.job_rows(sp, ids)
    except LedgerError:
        rows = {}
    column = dict.fromkeys(ids, 0)
    for _ in ids:  # longest path from a root: at most one pass per job settles it (a chain has no cycle)
        moved = False
        for parent, child in edges:
            if column[child] < column[parent] + 1:
                column[child], moved = column[parent] + 1, True
        if not moved:
            break
    by_column: dict[int, list[str]] = {}
    for job_id in ids:
        by_column.setdefault(column[job_id], []).append(job_id)
    tallest = max(len(members) for members in by_column.values())
    height = tallest * (NODE_H + GAP_Y) + GAP_Y
    nodes: dict[str, Node] = {}
    for n, members in sorted(by_column.items()):
        top = (height - len(members) * (NODE_H + GAP_Y) + GAP_Y) // 2
        for i, job_id in enumerate(members):
            nodes[job_id] = _node(job_id, rows.get(job_id), n * (NODE_W + GAP_X), top + i * (NODE_H + GAP_Y), view)
    lines = [
        Edge(nodes[p].x + NODE_W, nodes[p].y + NODE_H // 2, nodes[c].x, nodes[c].y + NODE_H // 2)
        for p, c in sorted(edges)
    ]
    return {
        "nodes": list(nodes.values()),
        "edges": lines,
        "width": (max(by_column) + 1) * (NODE_W + GAP_X) - GAP_X,
        "height": height,
        "node_w": NODE_W,
        "node_h": NODE_H,
        "cut": cut,
        "shown_max": CHAIN_MAX,
    }


def _node(job_id: str, row: Mapping[str, Any] | None, x: int, y: int, view: Mapping[str, Any]) -> Node:
    if row is None:  # purged: the ledger forgot it
        return Node(job_id, "purged", "", "", "", x, y, job_id == view["id"])
    key = "" if row["key"] == job_id else str(row["key"])
    key = key if len(key) <= _KEY_SHOWN else key[: _KEY_SHOWN - 1] + "…"
    reason = str(row["reason"] or "") if row["state"] == State.DEAD.value else ""
    return Node(job_id, str(row["state"]), str(row["task"]), key, reason, x, y, job_id == view["id"])


def find_job(sp: Spool, job_id: str) -> tuple[State, JobFile]:
    """The job's state and file: InvalidJob for a path-like id, NotFound for an unknown one."""
    if not is_valid_id(job_id):
        raise InvalidJob(f"{job_id!r} is not a job id")
    return sp.job(job_id)
