"""The dashboard's job pages: the filtered list, one job's page, and the moves a person asks for.

Every move goes through the facade (``Spool.requeue``, ``Spool.cancel``, ``Spool.submit``), so
the dashboard makes no move of its own. A bulk action takes the list's filter, forced to the
one state it applies to (requeue: dead; cancel: pending), shows what it would touch on a confirm
page, and acts on at most ``BULK_MAX`` jobs a time (the page says when more remain). After every
move the sampler samples at once (``Live.refresh``), so the state tabs of the page an action lands
on count it; the pages then follow changes live (``follow``).
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from spool.views import browse
from spool.schedule import folder as scheduling
from spool.views import Filter
from spool.base.errors import InvalidJob, SpoolError
from spool.disk import State

from .auth import FormError, Session
from .story import (
    STATES,
    cursor_of,
    filter_fields,
    filter_of,
    find_job,
    job_story,
    progresses_of,
    run_text,
    runs_of,
)
from .pages import Dash, back, query_string, safe_next

PAGE_SIZE = 50
BULK_MAX = 10_000
BULK_SHOWN = 20
LOCK_WAIT_SECONDS = 5.0
BULK_ACTIONS = {"requeue": State.DEAD.value, "cancel": State.PENDING.value}
PICK_PREFIX = "pick-"  # a list's checkbox: pick-<job id>=1


def routes(dash: Dash) -> list[BaseRoute]:
    return [
        Route("/jobs", dash.view(lambda r, s: jobs_page(dash, r, s)), methods=["GET"]),
        Route("/jobs/{job_id}", dash.view(lambda r, s: job_page(dash, r, s)), methods=["GET"]),
        Route("/jobs/{job_id}/requeue", dash.action(lambda r, s, f: requeue_one(dash, r)), methods=["POST"]),
        Route("/jobs/{job_id}/cancel", dash.action(lambda r, s, f: cancel_one(dash, r)), methods=["POST"]),
        Route("/jobs/{job_id}/run-again", dash.action(lambda r, s, f: run_again(dash, r)), methods=["POST"]),
        Route("/bulk", dash.view(lambda r, s: bulk_confirm(dash, r, s)), methods=["GET"]),
        Route("/bulk", dash.action(lambda r, s, f: bulk_do(dash, f)), methods=["POST"]),
        Route("/bulk/picked", dash.action(lambda r, s, f: picked_do(dash, f)), methods=["POST"]),
    ]


def jobs_page(dash: Dash, request: Request, session: Session) -> Response:
    query = dict(request.query_params)
    f = filter_of(query)
    sample = dash.live.sample_now  # before the rows are read: the page follows on from it
    found = browse.page(dash.sp, f, before=cursor_of(query), limit=PAGE_SIZE)
    choices = dash.choices()
    return dash.render(
        "jobs.html",
        request,
        session,
        rows=found.rows,
        next=found.next,
        scan_stopped=found.scan_stopped,
        scan_files=browse.ARGS_SCAN_FILES,
        fields=filter_fields(f),
        matching=browse.count(dash.sp, f),
        counts=sample.counts,
        since=sample.version,
        states=STATES,
        tasks=choices.tasks,
        more_tasks=choices.more_tasks,
        reasons=choices.reasons,
        schedules=sorted(scheduling.entries(dash.sp)),
        first_page=not query.get("before"),
        page_size=PAGE_SIZE,
        progress=progresses_of(dash.sp, [row["id"] for row in found.rows if row["state"] == "leased"]),
        runs=runs_of(dash.sp, [row["id"] for row in found.rows]),
        run_text=run_text,
        now=dash.sp.clock.wall(),
    )


def job_page(dash: Dash, request: Request, session: Session) -> Response:
    since = dash.live.sample_now.version  # before the story is read: the page follows on from it
    story = job_story(dash.sp, request.path_params["job_id"])
    return dash.render("job.html", request, session, since=since, **story)


def requeue_one(dash: Dash, request: Request) -> Response:
    job_id = request.path_params["job_id"]
    find_job(dash.sp, job_id)
    target = dash.sp.requeue(job_id, timeout_seconds=LOCK_WAIT_SECONDS)
    dash.live.refresh()  # the page it lands on counts this move
    return back(f"/jobs/{job_id}", f"requeued: now {target.value}")


def cancel_one(dash: Dash, request: Request) -> Response:
    job_id = request.path_params["job_id"]
    find_job(dash.sp, job_id)
    outcome = dash.sp.cancel(job_id, timeout_seconds=LOCK_WAIT_SECONDS)
    note = "cancelled" if outcome == "cancelled" else "cancel requested: its worker stops it at its next heartbeat"
    dash.live.refresh()  # the page it lands on counts this move
    return back(f"/jobs/{job_id}", note)


def run_again(dash: Dash, request: Request) -> Response:
    """A new job (a new id, no key) with the same task, args and limits."""
    _, job_file = find_job(dash.sp, request.path_params["job_id"])
    job = job_file.job
    new_id = dash.sp.submit(job.task, job.args, priority=job.priority, max_tries=job.max_tries, timeout=job.timeout)
    dash.live.refresh()  # the page it lands on counts this move
    return back(f"/jobs/{new_id}", f"a new run of {job.id}")


def _bulk_filter(values: dict[str, str]) -> tuple[str, Filter]:
    action = values.get("action", "")
    if action not in BULK_ACTIONS:
        raise InvalidJob(f"action: one of {', '.join(BULK_ACTIONS)}, not {action!r}")
    return action, filter_of({**values, "state": BULK_ACTIONS[action]})


def bulk_confirm(dash: Dash, request: Request, session: Session) -> Response:
    if not session.is_admin:
        raise FormError(403, f"token {session.name!r} has role {session.role}: only admin may act")
    action, f = _bulk_filter(dict(request.query_params))
    ids = list(browse.matching_ids(dash.sp, f, limit=BULK_MAX + 1))
    rows = browse.job_rows(dash.sp, ids[:BULK_SHOWN])
    return dash.render(
        "bulk.html",
        request,
        session,
        action=action,
        fields=filter_fields(f),
        total=min(len(ids), BULK_MAX),
        more=len(ids) > BULK_MAX,
        shown=[row for row in (rows.get(job_id) for job_id in ids[:BULK_SHOWN]) if row],
    )


def bulk_do(dash: Dash, form: dict[str, str]) -> Response:
    action, f = _bulk_filter(form)
    done, refused = 0, 0
    ids = list(browse.matching_ids(dash.sp, f, limit=BULK_MAX + 1))
    for job_id in ids[:BULK_MAX]:
        try:
            if action == "requeue":
                dash.sp.requeue(job_id, timeout_seconds=LOCK_WAIT_SECONDS)
            else:
                dash.sp.cancel(job_id, timeout_seconds=LOCK_WAIT_SECONDS)
            done += 1
        except SpoolError:
            refused += 1  # it moved meanwhile (or was re-armed with its parent): not ours to force
    verb = "requeued" if action == "requeue" else "cancelled"
    note = f"{verb} {done}" + (f"; {refused} had moved meanwhile" if refused else "")
    note += f"; more than {BULK_MAX} matched: run it again for the rest" if len(ids) > BULK_MAX else ""
    fields: dict[str, Any] = {k: v for k, v in filter_fields(f).items() if k != "state"}
    dash.live.refresh()  # the page it lands on counts this move
    return back("/jobs?" + query_string(fields, state=BULK_ACTIONS[action]), note)


def picked_do(dash: Dash, form: dict[str, str]) -> Response:
    """Requeue or cancel the jobs a person ticked in a list (at most a page of them: the form's
    field cap), then back to that list, whose tabs count the moves. A ticked job that can't take
    the move (requeue: not dead; cancel: already ended) is left as it is and counted apart."""
    action = form.get("action", "")
    if action not in BULK_ACTIONS:
        raise InvalidJob(f"action: one of {', '.join(BULK_ACTIONS)}, not {action!r}")
    ids = sorted(name.removeprefix(PICK_PREFIX) for name, on in form.items() if name.startswith(PICK_PREFIX) and on)
    if not ids:
        raise InvalidJob("no job was ticked: tick the rows to act on first")
    done, refused = 0, 0
    for job_id in ids:
        state, _ = find_job(dash.sp, job_id)
        try:
            if action == "requeue" and state is State.DEAD:
                dash.sp.requeue(job_id, timeout_seconds=LOCK_WAIT_SECONDS)
            elif action == "cancel" and not state.terminal:
                dash.sp.cancel(job_id, timeout_seconds=LOCK_WAIT_SECONDS)
            else:
                refused += 1
                continue
            done += 1
        except SpoolError:
            refused += 1  # it moved meanwhile: not ours to force
    verb = "requeued" if action == "requeue" else "cancelled"
    why = "not dead" if action == "requeue" else "already ended"
    note = f"{verb} {done} of {len(ids)} ticked"
    note += f"; {refused} {why} (or moved meanwhile): left as they were" if refused else ""
    dash.live.refresh()  # the page it lands on counts these moves
    target = safe_next(form.get("back"))
    return back(target if target.startswith("/jobs") else "/jobs", note)
