"""The dashboard's purge (``/purge``, admins only): ``spool purge`` from a form, with a confirm step.

The form takes what ``spool purge`` takes: an age (``--older-than``: 7d, 12h, 30m) and the
states (done, dead or both). Sent, it shows how many finished jobs that would remove and the
newest of them, and moves nothing; its confirm button posts the same fields, and
``spool.admin.purge`` removes the jobs with their results, logs and keys, as the command does
(each job's own crash-safe steps). The age is counted again when the purge runs, so a job that
aged past it while the page was open goes too. Other roles get 403, on the form as on the post.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from spool import admin
from spool.base.errors import InvalidJob, UsageError
from spool.disk import State
from spool.settings import parse_duration
from spool.views import browse

from .auth import FormError, Session
from .pages import Dash, back

STATE_CHOICES = {"done,dead": (State.DONE, State.DEAD), "done": (State.DONE,), "dead": (State.DEAD,)}
PREVIEW_SHOWN = 20


def routes(dash: Dash) -> list[BaseRoute]:
    return [
        Route("/purge", dash.view(lambda r, s: purge_page(dash, r, s)), methods=["GET"]),
        Route("/purge", dash.action(lambda r, s, f: purge_do(dash, f)), methods=["POST"]),
    ]


def asked(values: dict[str, str]) -> tuple[str, float, str, tuple[State, ...]]:
    """(the age as typed, in seconds, the states as typed, as states); InvalidJob when bad."""
    older_than = values.get("older_than", "").strip()
    try:
        seconds = parse_duration(older_than)
    except UsageError as err:
        raise InvalidJob(f"older than: {err}") from None
    state = values.get("state", "done,dead")
    if state not in STATE_CHOICES:
        raise InvalidJob(f"state: one of {', '.join(STATE_CHOICES)}, not {state!r}")
    return older_than, seconds, state, STATE_CHOICES[state]


def purge_page(dash: Dash, request: Request, session: Session) -> Response:
    if not session.is_admin:
        raise FormError(403, f"token {session.name!r} has role {session.role}: only admin may purge")
    values = dict(request.query_params)
    preview = None
    if values.get("older_than"):
        older_than, seconds, state, states = asked(values)
        cutoff = dash.sp.clock.wall() - seconds
        ids = sorted(dash.sp.ledger.updated_before([s.value for s in states], cutoff), reverse=True)
        rows = browse.job_rows(dash.sp, ids[:PREVIEW_SHOWN])
        preview = {"total": len(ids), "shown": [rows[i] for i in ids[:PREVIEW_SHOWN] if i in rows]}
    return dash.render(
        "purge.html",
        request,
        session,
        older_than=values.get("older_than", ""),
        state=values.get("state", "done,dead"),
        choices=list(STATE_CHOICES),
        preview=preview,
    )


def purge_do(dash: Dash, form: dict[str, str]) -> Response:
    older_than, seconds, state, states = asked(form)
    purged = admin.purge(dash.sp, seconds, states)
    dash.live.refresh()  # the page it lands on counts this
    return back("/purge", f"purged {len(purged)} {state.replace(',', ' and ')} job(s) older than {older_than}")
