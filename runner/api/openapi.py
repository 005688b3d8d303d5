"""GET /openapi.json: the API described for tools (OpenAPI 3.1), written by hand from the endpoints.

docs/api.md is the same API for people, with curl examples. Any token may read this document
(only /healthz is anonymous).
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from spool.runner.api.bodies import body as _body, errors as _errors, json_reply as _json, op as _op
from spool.runner.api.context import ApiContext, require
from spool.runner.api.runners import DISPATCH_PATHS

_HEALTH: dict[str, Any] = {
    "type": "object",
    "properties": {"ok": {"type": "boolean"}, "coordinator": {"type": "boolean"}},
    "required": ["ok", "coordinator"],
}
_STATUS = {"$ref": "#/components/schemas/JobStatus"}
_QUEUE = {"$ref": "#/components/schemas/Queue"}
_HOLD = {
    "type": ["object", "null"],
    "description": "the limit that keeps the job (or queue) from a claim now, or null",
    "properties": {"queue": {"type": "string"}, "limit": {"enum": ["paused", "concurrency", "rate"]}, "text": {}},
}
_ID_PATTERN = "^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$"
_ID = {"name": "id", "in": "path", "required": True, "schema": {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,64}$"}}


_FENCE = {"fence": {"type": "string", "description": "the lease's fence, as POST /v1/leases gave it"}}
_LEASE_ERRORS = _errors(400, 401, 403, 404, 409, 413, 422)

PATHS: dict[str, Any] = {
    "/healthz": {
        "get": _op(
            "The server is up (200 whenever it answers: what a load balancer acts on); whether a coordinator runs",
            "anonymous",
            {"200": _json(_HEALTH, "ok, and coordinator: true or false")},
            security=[],
        )
    },
    "/v1/jobs": {
        "post": _op(
            "Submit a job (durable when answered)",
            "submit, admin (a shell job: admin)",
            {
                "201": _json(_STATUS, "a new job"),
                "200": _json(_STATUS, "its key was seen before: the existing job"),
                **_errors(400, 401, 403, 408, 413, 422, 429, 503),
            },
            requestBody=_body({"$ref": "#/components/schemas/JobSpec"}),
        ),
        "get": _op(
            "Jobs, newest first, paged from the ledger",
            "any",
            {"200": _json({"$ref": "#/components/schemas/JobPage"}, "a page"), **_errors(401, 422)},
            parameters=[
                {"name": "state", "in": "query", "schema": {"enum": ["pending", "waiting", "leased", "done", "dead"]}},
                {"name": "task", "in": "query", "schema": {"type": "string"}},
                {"name": "queue", "in": "query", "schema": {"type": "string"}},
                {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 500}},
                {"name": "cursor", "in": "query", "schema": {"type": "string"}, "description": "next_cursor"},
            ],
        ),
    },
    "/v1/jobs/{id}": {
        "get": _op("A job's status", "any", {"200": _json(_STATUS, "its status"), **_errors(401, 404, 422)}),
        "parameters": [_ID],
    },
    "/v1/jobs/{id}/result": {
        "get": _op(
            "A done job's result",
            "any",
            {
                "200": _json({"type": "object", "properties": {"id": {}, "result": {}}}, "the result"),
                **_errors(401, 404, 409, 422),
            },
        ),
        "parameters": [_ID],
    },
    "/v1/jobs/{id}/cancel": {
        "post": _op(
            "Cancel: pending/waiting -> dead at once; leased: the worker kills it at its next heartbeat",
            "submit, admin",
            {
                "200": _json(
                    {"type": "object", "properties": {"id": {}, "outcome": {"enum": ["cancelled", "requested"]}}},
                    "done or requested",
                ),
                **_errors(401, 403, 404, 409, 422, 503),
            },
        ),
        "parameters": [_ID],
    },
    "/v1/jobs/{id}/requeue": {
        "post": _op(
            "Requeue a dead job with a fresh set of tries",
            "submit, admin (a shell job: admin)",
            {
                "200": _json({"type": "object", "properties": {"id": {}, "state": {}}}, "pending or waiting"),
                **_errors(401, 403, 404, 409, 422, 503),
            },
        ),
        "parameters": [_ID],
    },
    "/v1/leases": {
        "post": _op(
            "Long-poll for a job of the worker's tasks",
            "work (the token's name is the worker), dispatch (names its runner: the holder is <token>/<runner>)",
            {
                "200": _json({"$ref": "#/components/schemas/Lease"}, "a lease"),
                "204": {"description": "none in time"},
                **_errors(400, 401, 403, 413, 422, 429),
            },
            requestBody=_body(
                {
                    "type": "object",
                    "required": ["tasks"],
                    "properties": {
                        "tasks": {"type": "array", "items": {"type": "string"}},
                        "queues": {"type": "array", "items": {"type": "string"}, "description": "default: every queue"},
                        "wait": {"type": "number", "minimum": 0},
                        "runner": {"type": "string", "description": "a dispatch token's runner (required for one)"},
                        "job": {"type": "string", "description": "claim this job or none (spool run-one --job)"},
                    },
                }
            ),
        ),
    },
    "/v1/leases/{id}/heartbeat": {
        "post": _op(
            "Heartbeat a lease (with progress)",
            "work (its own leases), dispatch (its runners' leases)",
            {
                "200": _json(
                    {
                        "type": "object",
                        "properties": {"cancel": {"type": "boolean"}, "heartbeat_seconds": {"type": "number"}},
                    },
                    "beat (cancel: kill the attempt, then fail it; heartbeat_seconds: the interval now)",
                ),
                **_LEASE_ERRORS,
            },
            requestBody=_body(
                {
                    "type": "object",
                    "required": ["fence"],
                    "properties": {
                        **_FENCE,
                        "counter": {"type": "integer", "minimum": 0, "description": "the worker's beat count"},
                        "progress": {
                            "type": "object",
                            "properties": {"fraction": {"type": ["number", "null"]}, "message": {"type": "string"}},
                        },
                    },
                }
            ),
        ),
        "parameters": [_ID],
    },
    "/v1/leases/{id}/complete": {
        "post": _op(
            "Complete a lease with its result (the first result wins)",
            "work (its own leases), dispatch (its runners' leases)",
            {"200": _json({"type": "object"}, "done"), **_LEASE_ERRORS},
            requestBody=_body(
                {"type": "object", "required": ["fence", "result"], "properties": {**_FENCE, "result": {}}}
            ),
        ),
        "parameters": [_ID],
    },
    "/v1/leases/{id}/fail": {
        "post": _op(
            "Fail a lease (retried after backoff, or dead after its last try or with reject)",
            "work (its own leases), dispatch (its runners' leases)",
            {"200": _json({"type": "object"}, "failed"), **_LEASE_ERRORS},
            requestBody=_body(
                {
                    "type": "object",
                    "required": ["fence", "error"],
                    "properties": {**_FENCE, "error": {"type": "string"}, "reject": {"type": "boolean"}},
                }
            ),
        ),
        "parameters": [_ID],
    },
    "/v1/leases/{id}/release": {
        "post": _op(
            "Give a lease back at a graceful stop (its try is not spent)",
            "work (its own leases), dispatch (its runners' leases)",
            {"200": _json({"type": "object"}, "pending again"), **_LEASE_ERRORS},
            requestBody=_body({"type": "object", "required": ["fence"], "properties": {**_FENCE}}),
        ),
        "parameters": [_ID],
    },
    "/v1/queues": {
        "get": _op(
            "Every queue: its limits, counts and what holds it (`spool queue list --json`)",
            "any",
            {
                "200": _json(
                    {
                        "type": "object",
                        "properties": {
                            "queues": {"type": "array", "items": _QUEUE, "maxItems": 1000},
                            "truncated": {"type": "boolean"},
                        },
                    },
                    "the queues",
                ),
                **_errors(401),
            },
        ),
    },
    "/v1/queues/{name}": {
        "post": _op(
            "Set a queue's limits, pause or resume it (writes queues/<name>.yaml)",
            "admin",
            {"200": _json(_QUEUE, "the queue now"), **_errors(400, 401, 403, 413, 422)},
            requestBody=_body(
                {
                    "type": "object",
                    "additionalProperties": False,
                    "minProperties": 1,
                    "properties": {
                        "concurrency": {"type": "integer", "minimum": 1},
                        "rate": {"type": "string", "pattern": "^[0-9]+/[smh]$"},
                        "paused": {"type": "boolean"},
                        "clear": {"type": "boolean", "description": "drop concurrency and rate first"},
                    },
                }
            ),
        ),
        "parameters": [
            {"name": "name", "in": "path", "required": True, "schema": {"type": "string", "pattern": _ID_PATTERN}}
        ],
    },
    **DISPATCH_PATHS,
    "/metrics": {"get": _op("Prometheus metrics", "any", {"200": {"description": "text exposition format"}})},
    "/openapi.json": {"get": _op("This document", "any", {"200": _json({"type": "object"}, "OpenAPI 3.1")})},
    "/": {
        "get": _op(
            "The dashboard (a login form takes a token)",
            "any; admin may act",
            {"200": {"description": "HTML"}},
            security=[],
        )
    },
}

SCHEMAS: dict[str, Any] = {
    "Error": {
        "type": "object",
        "required": ["error", "where"],
        "properties": {"error": {"type": "string"}, "where": {"type": ["string", "null"]}},
    },
    "JobSpec": {
        "type": "object",
        "required": ["task"],
        "additionalProperties": False,
        "properties": {
            "task": {"type": "string"},
            "args": {"type": "object"},
            "key": {"type": "string", "description": "idempotency key: the same key answers with the same job"},
            "priority": {"type": "integer"},
            "max_tries": {"type": "integer", "minimum": 1},
            "timeout": {"type": "number", "description": "seconds"},
            "delay": {"type": "number", "description": "seconds from now before it may run"},
            "depends_on": {"type": "array", "items": {"type": "string"}},
            "queue": {"type": "string", "pattern": _ID_PATTERN, "description": "default `default`"},
        },
    },
    "JobStatus": {
        "type": "object",
        "description": "what `spool status ID --json` prints",
        "properties": {
            name: {}
            for name in (
                "id",
                "key",
                "task",
                "queue",
                "state",
                "reason",
                "attempt",
                "tries",
                "max_tries",
                "attempts",
                "lease",
                "error",
                "result",
                "priority",
                "submitted_at",
                "depends_on",
                "not_before",
            )
        }
        | {"held_by": _HOLD},
    },
    "Queue": {
        "type": "object",
        "description": "one queue; with `error` set, the limits are the last valid ones, still in force",
        "properties": {
            "name": {"type": "string"},
            "concurrency": {"type": ["integer", "null"]},
            "rate": {"type": ["string", "null"], "description": "N/s, N/m or N/h"},
            "paused": {"type": "boolean"},
            "error": {"type": ["string", "null"], "description": "why queues/<name>.yaml does not parse"},
            **{name: {"type": "integer"} for name in ("pending", "ready", "leased", "claims_last_minute")},
            "oldest_ready_seconds": {"type": ["number", "null"]},
            "held_by": _HOLD,
        },
    },
    "JobPage": {
        "type": "object",
        "properties": {"jobs": {"type": "array", "items": _STATUS}, "next_cursor": {"type": ["string", "null"]}},
    },
    "Lease": {
        "type": "object",
        "properties": {
            "lease": {
                "type": "object",
                "properties": {
                    name: {}
                    for name in (
                        "id",
                        "attempt",
                        "fence",
                        "task",
                        "args",
                        "timeout_seconds",
                        "deadline",
                        "tries_left",
                        "heartbeat_seconds",
                        "parent_results",
                    )
                },
            }
        },
    },
}


def document() -> dict[str, Any]:
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "spool",
            "version": "1",
            "description": "A crash-safe job runner whose queue is a directory.",
        },
        "paths": PATHS,
        "components": {
            "schemas": SCHEMAS,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}],
    }


def routes(ctx: ApiContext) -> list[BaseRoute]:
    async def openapi(request: Request) -> Response:
        require(ctx, request, "submit", "work")
        return JSONResponse(document())

    return [Route("/openapi.json", openapi, methods=["GET"])]
