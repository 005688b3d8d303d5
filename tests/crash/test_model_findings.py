"""What the model checker found in the code (models/README.md, "What the models found"), through
real processes: each race is run with separate ``spool`` processes on a real spool, in the order
of the model's trail.

The windows are microseconds wide, so a process is held at the model's step instead of hoping
for the timing: it runs with a seam (a child script here) that, at that step, writes ``held`` and
waits for ``go``, while the other processes make their moves for real. The seam injects a pause
and nothing else; every file is the real one. Without the fixes both tests fail (a second job).
The models' trails for the same bugs are kept by tests/models/test_models.py (the bug switches
``BUG_LOOKUP_ONE_LOOK`` and ``BUG_FIRE_NO_RECHECK``); tests/unit/test_key_lookup_race.py and
test_slot_purge_race.py run the same steps in one process.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from crashkit import FAST, Kit
from support import run_spool, wait_until
from test_schedules_running import jobs_of

from spool.disk.layout import job_name
from spool.schedule import fired as firings

DAY = 86400.0
HOLD_SECONDS = 60  # a held process goes on by itself after this, so a failed test never hangs

# The pause both children share: write ``held`` (with what was seen), wait for ``go``.
HOLD = f"""
import sys, time
from pathlib import Path

def hold(folder, seen):
    Path(folder, "held").write_text(str(seen))
    deadline = time.monotonic() + {HOLD_SECONDS}
    while not Path(folder, "go").exists() and time.monotonic() < deadline:
        time.sleep(0.01)
"""

# A keyed submit held inside its key lookup, right after the look at pending/ missed the job.
SUBMITTER = (
    HOLD
    + """
from spool import Spool
from spool.disk import fsio
from spool.disk.layout import State, job_name

root, folder, key, job_id, args = sys.argv[1:6]
sp = Spool(root)
pending = sp.layout.fd(State.PENDING)

class HeldAfterPending(fsio.RealFS):
    def exists(self, dir_fd, name):
        there = super().exists(dir_fd, name)
        if dir_fd == pending and name == job_name(job_id) and not there and not Path(folder, "held").exists():
            hold(folder, "pending/ looked at")
        return there

fsio.use(HeldAfterPending())
import json
print(sp.submit("trace", json.loads(args), key=key), flush=True)
sp.close()
"""
)

# A coordinator held between its read of a schedule's record (a firing begun, unfinished) and
# the firing it then finishes.
COORDINATOR = (
    HOLD
    + """
from spool.schedule import fired

folder, name = sys.argv[1:3]
read = fired.read_fired

def held_after_read(sp, schedule):
    record = read(sp, schedule)
    if schedule == name and record.unfinished is not None and not Path(folder, "held").exists():
        hold(folder, record.unfinished)
    return record

fired.read_fired = held_after_read
from spool.cli.main import main
main(sys.argv[3:])
"""
)


def start_child(kit: Kit, tmp_path: Path, script: str, *args: str, answer: bool = False) -> subprocess.Popen[bytes]:
    """A child running ``script`` among the test's processes (``Procs.launch``: a session of its
    own, SIGKILLed at teardown, logged where ``kit.log`` reads)."""
    path = tmp_path / f"child-{len(kit.procs.started)}.py"
    path.write_text(script, encoding="utf-8")
    return kit.procs.launch([sys.executable, str(path), *args], name="child", answer=answer)


def held(folder: Path) -> str:
    return str(wait_until(lambda: (folder / "held").exists() and (folder / "held").read_text(), 30, message="the hold"))


def test_a_keyed_submit_held_mid_lookup_finds_its_job_expired_back_to_pending(kit: Kit, tmp_path: Path) -> None:
    """Trail (BUG_LOOKUP_ONE_LOOK): a submit of key K looks at pending/ (the job is in leased/);
    the coordinator expires the job's lease (its worker was killed): leased/ -> pending/; the
    submit looks at leased/ and finds nothing. It must look again under the job's lock and return
    the job, not make K a second one."""
    folder = tmp_path / "hold"
    folder.mkdir()
    trace = tmp_path / "trace.log"
    args = f'{{"path": "{trace}", "seconds": 60}}'
    kit.coordinator()
    job_id = kit.sp.submit("trace", {"path": str(trace), "seconds": 60}, key="invoice-7")
    worker = kit.worker("w1")
    wait_until(lambda: kit.runs(trace), 30, message="the job's first attempt")
    submitter = start_child(
        kit, tmp_path, SUBMITTER, str(kit.spool_dir), str(folder), "invoice-7", job_id, args, answer=True
    )
    assert held(folder) == "pending/ looked at"
    os.killpg(worker.pid, signal.SIGKILL)  # the coordinator expires its lease: back to pending/
    worker.wait()
    wait_until(lambda: kit.folders().get(job_id) == ["pending"], 30, message="the expiry's move to pending/")
    (folder / "go").touch()
    out, _ = submitter.communicate(timeout=30)
    assert submitter.returncode == 0, kit.procs.output()
    assert out.decode().strip() == job_id, "the held submit made its key a second job"
    assert kit.folders() == {job_id: ["pending"]}


def test_a_coordinator_held_before_finishing_a_firing_does_not_refire_a_slot_purged_meanwhile(
    kit: Kit, tmp_path: Path
) -> None:
    """Trail (BUG_FIRE_NO_RECHECK): a coordinator dies after its slot's job is made, before the
    record; the next one reads the record (a firing unfinished) and is held there; a person
    cancels and purges the slot's job (the purge records the slot fired, then removes the job and
    its key); the held coordinator goes on to finish the firing. It must not make the slot again."""
    folder = tmp_path / "hold"
    folder.mkdir()
    daily = kit.spool_dir / "schedules" / "daily.yaml"
    daily.write_text("task: echo\nargs: {n: 1}\ncron: '0 0 * * *'\n")
    os.utime(daily, (time.time() - 3 * DAY, time.time() - 3 * DAY))  # catchup one: today's 00:00 fires
    crashed = kit.coordinator(env={"SPOOL_CRASH_AT": "coordinator:after-commit"})
    assert crashed.wait(timeout=30) == -signal.SIGKILL
    ((job_id,),) = jobs_of(kit, "daily").values()
    assert run_spool("fsck", "--repair", spool=kit.spool_dir).returncode == 0  # the ledger row it never wrote
    argv = ["--spool", str(kit.spool_dir), *FAST, "coordinator"]
    coordinator = start_child(kit, tmp_path, COORDINATOR, str(folder), "daily", *argv)
    slot = float(held(folder))
    assert run_spool("cancel", job_id, spool=kit.spool_dir).returncode == 0
    wait_until(
        lambda: (
            run_spool("purge", "--older-than", "0s", spool=kit.spool_dir).returncode == 0 and not jobs_of(kit, "daily")
        ),
        30,
        message="the purge of the slot's job",
    )
    assert firings.read_fired(kit.sp, "daily").slot == slot  # the purge recorded the firing
    (folder / "go").touch()
    said = wait_until(
        lambda: next(
            (line for line in kit.log(coordinator).splitlines() if "not fired again" in line or "fired slot" in line),
            None,
        ),
        30,
        message="the held coordinator's word on the slot",
    )
    assert "not fired again" in str(said), said
    assert jobs_of(kit, "daily") == {}, "the slot was made a second job"
    assert not any(name == job_name(job_id) for name in os.listdir(kit.spool_dir / "dead"))
    coordinator.send_signal(signal.SIGTERM)
    coordinator.wait(timeout=30)
    kit.fsck_ok()
