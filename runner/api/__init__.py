"""``spool serve``: the HTTPS API, remote workers' leases, the dashboard and the metrics.

Loaded only by ``spool serve`` (and by tests): nothing that ``spool submit`` or a local worker
imports may pull this package in, so its libraries (starlette, uvicorn, cryptography, jinja2,
prometheus-client) never cost a plain command its start-up time.
"""
