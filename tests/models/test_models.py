"""The move protocol model-checked with spin (models/, issue 23).

Each check builds a model with ``spin -a``, compiles the verifier and runs it; a property that
fails prints its trail as a story of moves (``spin_story.tell``). The reintroduced-bug variants
must each produce a counterexample, the two the models found in the code too (kept as bug
switches since the code was fixed; each has a regression test on the real code beside it). The
cross-check ties the models to the code: every crash point ``spool crash-points`` lists is named
by a model step or listed in models/README.md as not modelled (with the reason), and every name a
model uses exists.

Bounds: models/README.md. The default tier runs the leases scene and the slots exhaustively
(seconds); the slow tier runs the moves and keys scenes and everything at once by bitstate, and the
leases scene with two workers exhaustively; the stress tier, liveness after a crash by bitstate.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from spin_story import final_globals, steps_of, tell
from spool.base.crash import all_points

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "models"
SPOOL = MODELS / "spool.pml"
SLOTS = MODELS / "slots.pml"

needs_spin = pytest.mark.skipif(
    shutil.which("spin") is None or shutil.which("gcc") is None,
    reason="spin or gcc is not installed (apt-get install spin gcc; .ci/run installs spin)",
)


@dataclass
class Verdict:
    errors: int
    states: int
    seconds: float
    output: str
    story: list[str]

    def told(self) -> str:
        return "\n".join(["", *self.story])


def check(
    tmp_path: Path,
    model: Path,
    *defines: str,
    liveness: bool = False,
    bitstate: bool = False,
    timeout: float = 600,
) -> Verdict:
    """Build and run ``model``'s verifier with ``defines``: safety (assertions, invalid end states)
    or, with ``liveness``, the LTL ``live`` under weak fairness (built with ``LIVE``: spool.pml's
    note on it). A failure comes with its story."""
    work = tmp_path / model.stem
    work.mkdir(exist_ok=True)
    shutil.copy(model, work / model.name)
    flags = [f"-D{d}" for d in (*defines, *(["LIVE"] if liveness else []))]
    subprocess.run(["spin", *flags, "-a", model.name], cwd=work, check=True, capture_output=True, timeout=120)
    cflags = ["-O2", "-DMEMLIM=3000"] + (["-DBITSTATE"] if bitstate else ["-DCOLLAPSE"])
    cflags += ["-DNFAIR=8"] if liveness else ["-DNOCLAIM", "-DSAFETY"]
    subprocess.run(["gcc", *cflags, "-o", "pan", "pan.c"], cwd=work, check=True, capture_output=True, timeout=300)
    run = ["./pan", "-m200000", "-w28" if bitstate else "-w24"]
    run += ["-a", "-f", "-N", "live"] if liveness else []
    started = time.monotonic()
    out = subprocess.run(run, cwd=work, capture_output=True, text=True, timeout=timeout).stdout
    seconds = time.monotonic() - started
    errors = int(m[1]) if (m := re.search(r"errors: (\d+)", out)) else -1
    states = int(m[1]) if (m := re.search(r"(\d+) states, stored", out)) else 0
    story: list[str] = []
    if errors and (work / f"{model.name}.trail").exists():
        replay = subprocess.run(
            ["spin", *flags, "-t", "-p", "-g", model.name], cwd=work, capture_output=True, text=True, timeout=120
        ).stdout
        story = [*tell(work / model.name, replay, defines), "state at the end: " + final_globals(replay)]
        story += [line for line in out.splitlines() if line.startswith("pan:")]
    return Verdict(errors, states, seconds, out, story)


def assert_holds(verdict: Verdict, failed: str = "a property failed") -> None:
    """No error, and the search was whole: pan stopped by its memory bound (or out of memory)
    still prints "errors: 0", which would pass a check that never finished."""
    assert verdict.errors == 0, f"{failed}; the trail:{verdict.told()}"
    for cut_short in ("max search depth too small", "reached -DMEMLIM bound", "out of memory"):
        assert cut_short not in verdict.output, verdict.output


def assert_found(verdict: Verdict, property_text: str) -> None:
    assert verdict.errors > 0, f"the model no longer finds this bug:\n{verdict.output}"
    assert any(property_text in line for line in verdict.story), verdict.told()


# -- the protocol, scene by scene --------------------------------------------------------------------


@needs_spin
def test_the_leases_scene_holds_every_property_exhaustively_with_one_worker(tmp_path: Path) -> None:
    verdict = check(tmp_path, SPOOL, "SCENE_LEASES", "WORKERS=1")
    assert_holds(verdict)
    assert verdict.states > 1000


@needs_spin
@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("scene", ["MOVES", "KEYS"])
def test_the_moves_and_keys_scenes_hold_with_one_worker_by_bitstate(tmp_path: Path, scene: str) -> None:
    """Exhaustively these pass 135 million states (8 GB with hash compaction) without finishing;
    with the 3 GB bound they were cut at 51.5 million and, before assert_holds looked for the
    bound, read as passes. So bitstate: every state it reaches is checked, not every state."""
    assert_holds(check(tmp_path, SPOOL, f"SCENE_{scene}", "WORKERS=1", bitstate=True, timeout=1500))


@needs_spin
@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_leases_hold_exhaustively_with_two_workers(tmp_path: Path) -> None:
    assert_holds(check(tmp_path, SPOOL, "SCENE_LEASES", "WORKERS=2", "MAXCRASH=0", timeout=1500))


@needs_spin
@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_everything_at_once_with_two_workers_by_bitstate(tmp_path: Path) -> None:
    assert_holds(check(tmp_path, SPOOL, "SCENE_FULL", "WORKERS=2", bitstate=True, timeout=1500))


@needs_spin
@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_every_accepted_job_ends_under_weak_fairness(tmp_path: Path) -> None:
    """A worker stopped for good (SIGSTOP) beside a live one: its job still ends. (Until the
    model's expiry stopped offering "let go without expiring" as a free choice beside the expiry
    it owed, spin found a cycle of such looks starving the worker: a flaw of the model, not of
    the code, whose ``transitions.expire`` lets go only when the job moved on; models/README.md.)"""
    verdict = check(tmp_path, SPOOL, "SCENE_LEASES", "WORKERS=2", "MAXCRASH=0", liveness=True, timeout=1500)
    assert_holds(verdict, "a job never ends")


@needs_spin
@pytest.mark.stress
@pytest.mark.timeout(3600)
def test_every_accepted_job_ends_after_a_crash_by_bitstate(tmp_path: Path) -> None:
    """Liveness with one crash of any process at any step, scene by scene (one after another: each
    takes a core for minutes). Exhaustively these pass tens of millions of states and gigabytes
    (the leases scene: 57 million states, 6 GB, 13 minutes), so bitstate."""
    for scene, workers in (("LEASES", 2), ("MOVES", 1), ("KEYS", 1)):
        verdict = check(
            tmp_path, SPOOL, f"SCENE_{scene}", f"WORKERS={workers}", liveness=True, bitstate=True, timeout=1500
        )
        assert_holds(verdict, f"{scene}: a job never ends")


@needs_spin
def test_a_slot_fires_at_most_once_with_the_recheck(tmp_path: Path) -> None:
    assert_holds(check(tmp_path, SLOTS))


# -- the bugs reintroduced: each must give a counterexample --------------------------------------


@needs_spin
@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_bug_fsck_repair_unlinking_a_moving_jobs_key_makes_a_second_job(tmp_path: Path) -> None:
    verdict = check(tmp_path, SPOOL, "SCENE_FSCK", "WORKERS=1", "BUG_FSCK_UNLINK", bitstate=True, timeout=1500)
    assert_found(verdict, "one job per key")
    assert any("fsck.keys.judge_reservation: an orphaned reservation" in line for line in verdict.story)


@needs_spin
@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_bug_a_long_pass_taken_for_a_pause_keeps_a_stopped_workers_job_for_ever(tmp_path: Path) -> None:
    verdict = check(
        tmp_path, SPOOL, "SCENE_LEASES", "WORKERS=2", "MAXCRASH=0", "BUG_PAUSE_RENEWS", liveness=True, timeout=1500
    )
    assert verdict.errors > 0, verdict.output
    assert "acceptance cycle" in verdict.output, verdict.told()
    assert any("a long pass of its own taken for a pause" in line for line in verdict.story), verdict.told()


@needs_spin
def test_bug_a_drop_named_like_a_waiting_job_takes_its_place(tmp_path: Path) -> None:
    verdict = check(tmp_path, SPOOL, "SCENE_MOVES", "WORKERS=1", "BUG_DROP_TAKES_PLACE")
    assert_found(verdict, "no job replaced by a drop")


@needs_spin
def test_bug_a_dead_job_moved_back_by_hand_runs_past_max_tries(tmp_path: Path) -> None:
    verdict = check(tmp_path, SPOOL, "SCENE_MOVES", "WORKERS=1", "BUG_HAND_MOVED")
    assert_found(verdict, "no run past max_tries")


@needs_spin
def test_bug_a_purge_that_does_not_record_the_firing_fires_the_slot_again(tmp_path: Path) -> None:
    assert_found(check(tmp_path, SLOTS, "BUG_PURGE_FORGETS"), "a slot fired at most once")


# -- what the models found in the code, fixed since (models/README.md) -----------------------------


@needs_spin
def test_bug_a_keyed_submit_that_looks_once_misses_a_job_moving_back_to_pending(tmp_path: Path) -> None:
    """Found in the code by this model, then fixed (submission.job_kept_now; the real-code regression
    test: tests/unit/test_key_lookup_race.py): lookup_key looked for the reserved job folder by
    folder without its lock, so a job moving leased/ -> pending/ between two looks was missed and
    the key taken over (two jobs)."""
    verdict = check(tmp_path, SPOOL, "SCENE_FULL", "WORKERS=1", "BUG_LOOKUP_ONE_LOOK")
    assert_found(verdict, "one job per key")


@needs_spin
def test_bug_a_purge_between_a_takeovers_read_and_its_submit_fires_the_slot_again(tmp_path: Path) -> None:
    """Found in the code by this model, then fixed (spool.schedule.folder.fire rechecks the record
    under the key's lock; tests/unit/test_slot_purge_race.py runs the trail on the real code)."""
    assert_found(check(tmp_path, SLOTS, "BUG_FIRE_NO_RECHECK"), "a slot fired at most once")


# -- the models tied to the code -----------------------------------------------------------------


def not_modelled() -> dict[str, str]:
    """models/README.md's list of crash points left out: ``- `role:step`: because ...``."""
    text = (MODELS / "README.md").read_text()
    section = text.split("## Not modelled", 1)[1].split("\n## ", 1)[0]
    return {m[1]: m[2] for m in re.finditer(r"^- `([\w-]+:[\w-]+)`: (.+)$", section, flags=re.M)}


def modelled() -> set[str]:
    return {point for model in (SPOOL, SLOTS) for step in steps_of(model.read_text()) for point in step.crash}


def test_every_crash_point_is_named_by_a_model_step_or_listed_as_not_modelled() -> None:
    listed = subprocess.run(["spool", "crash-points"], capture_output=True, text=True, check=True).stdout.split()
    assert listed == all_points()
    missing = [point for point in listed if point not in modelled() and point not in not_modelled()]
    assert not missing, f"crash points no model step names (model them, or list them in models/README.md): {missing}"


def test_every_crash_point_a_model_names_exists() -> None:
    points = set(all_points())
    assert not modelled() - points, f"model steps name crash points that do not exist: {modelled() - points}"
    assert not set(not_modelled()) - points, f"README lists unknown points: {set(not_modelled()) - points}"
    assert not modelled() & set(not_modelled()), "a point is both modelled and listed as not modelled"
    assert all(reason.strip() for reason in not_modelled().values())


def test_every_model_step_names_a_function_that_exists() -> None:
    import importlib

    for model in (SPOOL, SLOTS):
        for step in steps_of(model.read_text()):
            name = "spool." + step.function if step.function.startswith("runner.") else step.function
            parts = name.split(".")
            for cut in range(len(parts), 0, -1):
                try:
                    target: object = importlib.import_module(".".join(parts[:cut]))
                except ImportError:
                    continue
                for attribute in parts[cut:]:
                    target = getattr(target, attribute)
                break
            else:
                raise AssertionError(f"{model.name}:{step.line}: no module for {step.function}")
