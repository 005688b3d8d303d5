"""``Spool.status`` of a job that moves between the look at the folders and the read of its file.

A status read found the job in leased/, and the coordinator's expiry moved it to pending/ before
the read: ``FileNotFoundError`` escaped from ``Spool.status`` (CI, tests/api/test_dispatch.py,
2026-12-05). Here a real ``release`` moves the job at that exact moment, through the fs seam."""

from __future__ import annotations

from pathlib import Path

from support import behind_the_seam
from spool import Spool
from spool.base.records import Lease
from spool.disk import fsio
from spool.disk.layout import State, job_name
from spool.moves import claim_held, release


def test_a_status_read_while_the_job_moves_finds_it_where_it_went(tmp_path: Path) -> None:
    sp = Spool.init(tmp_path / "spool", environ={})
    try:
        job_id = sp.submit("echo", {"n": 1})
        held = claim_held(sp, "w1", ["echo"])
        assert held is not None and held.job_file.id == job_id
        lease = Lease(job_id, "w1", held.job_file.attempt)
        leased_fd = sp.layout.fd(State.LEASED)
        moves: list[str] = []

        class MovesBeforeTheRead(fsio.RealFS):
            def read_file(self, dir_fd: int, name: str, max_bytes: int, **kwargs: bool) -> bytes:
                if not moves and dir_fd == leased_fd and name == job_name(job_id):
                    moves.append("released")
                    release(sp, lease, held)  # leased/ -> pending/, after the look, before the read
                return super().read_file(dir_fd, name, max_bytes, **kwargs)

        with behind_the_seam(MovesBeforeTheRead()):
            status = sp.status(job_id)
        assert moves == ["released"]  # the move happened inside the status read
        assert status["state"] == "pending"
    finally:
        sp.close()
