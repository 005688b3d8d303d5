"""Placeholder until its owner's module lands: no routes yet."""

from __future__ import annotations

from starlette.routing import BaseRoute

from spool.runner.api.context import ApiContext


def routes(ctx: ApiContext) -> list[BaseRoute]:
    return []
