"""A keyed submit finds its job while the job moves backwards in the folders' order.

The model checker found it (models/README.md, "What the models found"; the trail is kept by
tests/models/test_models.py::test_finding_a_keyed_submit_misses_a_job_moving_back_to_pending_as_built):
``lookup_key`` stats the folders one after another, so a job moving leased/ -> pending/ (a release,
an expiry, a failure) between the stat of pending/ and the stat of leased/ looked gone, and a
second submit of its key made a second job. Here the move is made, for real, at that exact
moment: a seam over the real filesystem runs a real ``release`` of the job right after the look
at pending/ (a window of microseconds that a process race rarely hits)."""

from __future__ import annotations

from pathlib import Path

from support import behind_the_seam
from spool import Spool
from spool.base.records import Lease
from spool.disk import fsio
from spool.disk.layout import State, job_name
from spool.moves import claim_held, release


def test_a_keyed_submit_finds_its_job_moving_back_to_pending_mid_look(tmp_path: Path) -> None:
    sp = Spool.init(tmp_path / "spool", environ={})
    try:
        first = sp.submit("echo", {"n": 1}, key="invoice-7")
        held = claim_held(sp, "w1", ["echo"])
        assert held is not None and held.job_file.id == first
        assert (sp.root / "leased" / job_name(first)).exists()
        lease = Lease(first, "w1", held.job_file.attempt)
        pending_fd = sp.layout.fd(State.PENDING)
        moves: list[str] = []

        class MovesBackMidLook(fsio.RealFS):
            def exists(self, dir_fd: int, name: str) -> bool:
                there = super().exists(dir_fd, name)
                if not moves and dir_fd == pending_fd and name == job_name(first) and not there:
                    moves.append("released")
                    release(sp, lease, held)  # leased/ -> pending/, between the two stats
                return there

        with behind_the_seam(MovesBackMidLook()):
            again = sp.submit("echo", {"n": 1}, key="invoice-7")
        assert moves == ["released"]  # the move happened inside the submit's look
        assert again == first  # one job for the key, not a second one
        assert sorted(p.name for p in (sp.root / "pending").iterdir() if not p.name.startswith(".")) == [
            job_name(first)
        ]
    finally:
        sp.close()
