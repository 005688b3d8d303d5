"""The moves: every transition of a job between the folders, and the repairs of one cut short.

``submission`` and ``batch`` put jobs in; ``ingest`` takes a file dropped in pending/;
``claiming`` and ``transitions`` are a live attempt's moves (claim; complete, fail, release,
expire), ``group``
the same claim and complete for several jobs at once (a worker's group commit);
``outcomes`` the endings they share with ``recovery``, which finishes or undoes whatever a
crash interrupted; ``chains`` (promote, skip) and ``ready`` (a delay ran out) are the
coordinator's own moves; ``remote_leases`` the API's view of a lease;
``store`` (a job's files and its lock) and ``fence`` (a live attempt's check that its file is
still its own) are what they all build on, with ``spares`` (the heartbeat and job files a
worker keeps to write its next ones over). A person's moves (cancel, requeue, purge) are
``spool.admin``, above ``spool.schedule`` (a purge records a schedule's firing first).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from spool.base.surface import lazy_surface

if TYPE_CHECKING:  # the surface runner/ and cli/ import (spool.base.surface)
    from spool.moves.chains import advance_waiting as advance_waiting
    from spool.moves.fence import Held as Held, start_queued as start_queued
    from spool.moves.group import Finished as Finished, claim_many as claim_many, complete_many as complete_many
    from spool.moves.ingest import ingest as ingest_drop  # noqa: F401 (a surface name; ``ingest`` is the module)
    from spool.moves.ready import make_ready as make_ready
    from spool.moves.recovery import reconcile as reconcile, resync_under_lock as resync_under_lock
    from spool.moves.remote_leases import (
        fence_of as fence_of,
        fence_worker as fence_worker,
        held_by_fence as held_by_fence,
        leases_of as leases_of,
    )
    from spool.moves.spares import begin as begin_spare_beats, drop_all as drop_spare_beats  # noqa: F401 (surface names)
    from spool.moves.spares import release as release_spares  # noqa: F401 (surface names)
    from spool.moves.spares import claims_to_settle as claims_to_settle, settle_claims as settle_claims
    from spool.moves.store import read_job as read_job, state_of as state_of
    from spool.moves.submission import job_of_spec as job_of_spec
    from spool.moves.claiming import claim_held as claim_held
    from spool.moves.transitions import (
        cancel_leased as cancel_leased,
        complete as complete,
        expire as expire,
        fail as fail,
        heartbeat as heartbeat,
        lease_status as lease_status,
        release as release,
    )

__getattr__ = lazy_surface(__name__, __file__)
