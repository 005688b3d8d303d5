"""The shapes of the API's JSON: the work endpoints' request bodies checked (``runner.api.leases``,
``runner.api.runners``: exactly these fields, task and queue names, bounded numbers, a heartbeat's
progress; each wrong one a 422 saying where), and the pieces every OpenAPI entry is made of (a
JSON answer, the error answers by status, an operation with its roles, a JSON request body)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from spool.disk import is_valid_id
from spool.registry import is_valid_task_name
from spool.runner.api.context import ApiError, object_body

MAX_TASKS = 256
MAX_PROGRESS_MESSAGE = 1000


def fields(
    value: Any, *, required: tuple[str, ...] = (), optional: tuple[str, ...] = (), where: str = "body"
) -> dict[str, Any]:
    """``value`` as an object with exactly these fields (the required ones present), or 422."""
    body = object_body(value, where)
    for name in body:
        if name not in required and name not in optional:
            raise ApiError(422, f"unknown field {str(name)[:80]!r}", f"{where}.{str(name)[:80]}")
    for name in required:
        if name not in body:
            raise ApiError(422, f"missing field {name!r}", f"{where}.{name}")
    return body


def tasks_of(value: Any) -> list[str]:
    return _names(value, "task", "body.tasks", is_valid_task_name)


def queues_of(value: Any) -> list[str]:
    return _names(value, "queue", "body.queues", is_valid_id)


def _names(value: Any, kind: str, where: str, is_valid: Callable[[Any], bool]) -> list[str]:
    """A list of 1 to ``MAX_TASKS`` names each ``is_valid``, duplicates dropped in order, or 422."""
    if not isinstance(value, list) or not 0 < len(value) <= MAX_TASKS:
        raise ApiError(422, f"expected a list of 1 to {MAX_TASKS} {kind} names", where)
    for n, name in enumerate(value):
        if not is_valid(name):
            raise ApiError(422, f"{str(name)[:80]!r} is not a {kind} name", f"{where}[{n}]")
    return list(dict.fromkeys(value))


def number(value: Any, where: str, low: float, high: float) -> float:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not low <= value <= high:
        raise ApiError(422, f"expected a number of seconds from {low:g} to {high:g}", where)
    return float(value)


def progress_of(value: Any) -> tuple[float | None, str]:
    """A heartbeat's ``progress``: ``{"fraction": 0..1 or null, "message": str}``, both optional."""
    progress = fields(value, optional=("fraction", "message"), where="body.progress")
    fraction = progress.get("fraction")
    if fraction is not None:
        fraction = number(fraction, "body.progress.fraction", 0.0, 1.0)
    message = progress.get("message", "")
    if not isinstance(message, str) or len(message) > MAX_PROGRESS_MESSAGE:
        raise ApiError(422, f"expected a string of at most {MAX_PROGRESS_MESSAGE} characters", "body.progress.message")
    return fraction, message


# -- the OpenAPI pieces (runner.api.openapi, runner.api.runners) ---------------------------------

ERROR = {"$ref": "#/components/schemas/Error"}


def json_reply(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def errors(*codes: int) -> dict[str, Any]:
    words = {
        400: "not JSON, or a bad header",
        401: "no token, or an unknown or revoked one",
        403: "the token's role may not do this",
        404: "no such job (or no result yet)",
        408: "the body did not arrive whole in time",
        409: "the job (or lease) is not in a state that allows this",
        413: "the body is over the cap",
        422: "the body or a parameter has the wrong shape; `where` says which",
        429: "too much at once: the spool is full (backpressure), or too many lease requests wait; see Retry-After",
        503: "the disk is full or a job's lock is busy; see Retry-After",
    }
    return {str(code): json_reply(ERROR, words[code]) for code in codes}


def op(summary: str, roles: str, responses: dict[str, Any], **more: Any) -> dict[str, Any]:
    return {"summary": summary, "description": f"Roles: {roles}.", "responses": responses, **more}


def body(schema: dict[str, Any]) -> dict[str, Any]:
    return {"required": True, "content": {"application/json": {"schema": schema}}}
