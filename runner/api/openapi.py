"""GET /openapi.json: the API described for tools (filled in below)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from spool.runner.api.context import ApiContext


def routes(ctx: ApiContext) -> list[BaseRoute]:
    async def document(request: Request) -> Response:
        return JSONResponse({"openapi": "3.1.0", "info": {"title": "spool", "version": "1"}, "paths": {}})

    return [Route("/openapi.json", document, methods=["GET"])]
