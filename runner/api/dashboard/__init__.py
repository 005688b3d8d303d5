"""The dashboard at ``/``: server-rendered pages behind a session cookie, for people.

- ``site``: the routes, the login form, the overview and its live event stream;
- ``overview``: the overview's warnings (as ``spool stats`` gives them) and its per-task and
  per-queue tables;
- ``auth``: the login (a token given once, then a session), sessions per token, CSRF;
- ``pages``: what every page shares (``Dash``: templates, the session check, headers, errors);
- ``jobs``: the job list, one job's page and the moves a person asks for;
- ``story``: what the job pages show (a filter from a query, a job's whole story, its chain);
- ``busy``: the busy view, what runs now (worker, runtime, progress);
- ``purge``: ``spool purge`` from a form with a confirm step, for admins;
- ``admin_pages``: the schedules and workers pages;
- ``queues``: the queues page (limits, counts, what holds each) and pause/resume;
- ``live``: the live numbers, one sampler per server shared by every open browser;
- ``follow``: what one browser's stream follows besides the numbers (a job list's rows, one job);
- ``templates/`` and ``static/``: the pages' HTML, CSS and JavaScript.
"""

from spool.runner.api.dashboard.site import routes

__all__ = ["routes"]
