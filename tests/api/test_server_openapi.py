"""GET /openapi.json describes every endpoint the app serves (and the ones of the shared design
whose modules land later), and needs a token like everything but /healthz."""

from __future__ import annotations

import re
from typing import Any

from starlette.routing import Route

from spool import Spool
from spool.runner.api.app import create_app
from spool.runner.api.context import ApiContext
from spool.runner.api.openapi import document
from spool.tokens import TokenStore

DESIGNED = {
    ("/v1/jobs", "post"),
    ("/v1/jobs", "get"),
    ("/v1/jobs/{id}", "get"),
    ("/v1/jobs/{id}/result", "get"),
    ("/v1/jobs/{id}/cancel", "post"),
    ("/v1/jobs/{id}/requeue", "post"),
    ("/v1/leases", "post"),
    ("/v1/leases/{id}/heartbeat", "post"),
    ("/v1/leases/{id}/complete", "post"),
    ("/v1/leases/{id}/fail", "post"),
    ("/metrics", "get"),
    ("/healthz", "get"),
    ("/", "get"),
    ("/openapi.json", "get"),
}


def _described() -> set[tuple[str, str]]:
    return {(path, method) for path, item in document()["paths"].items() for method in item if method != "parameters"}


def test_every_route_of_the_app_and_of_the_design_is_described(sp: Spool) -> None:
    app = create_app(ApiContext(sp=sp, tokens=TokenStore(sp)))
    served = {
        (re.sub(r":[a-z]+}", "}", route.path), method.lower())
        for route in app.routes
        if isinstance(route, Route) and route.methods
        for method in route.methods
        if method != "HEAD"
    }
    # The dashboard's pages and forms (runner/api/dashboard/) are HTML for a browser behind a
    # session cookie, not the JSON API: the document describes them as one entry, "/".
    api = {(path, method) for path, method in served if path.startswith("/v1/") or path in _MACHINE_PATHS}
    assert api - _described() == set()
    assert DESIGNED - _described() == set()


_MACHINE_PATHS = {"/metrics", "/healthz", "/openapi.json"}


def test_the_document_needs_a_token(served: Any) -> None:
    assert served.call("GET", "/openapi.json").status == 401
    got = served.call("GET", "/openapi.json", token=served.token("w-1", "work"))
    assert got.status == 200 and got.json["openapi"].startswith("3.") and "/v1/jobs" in got.json["paths"]
