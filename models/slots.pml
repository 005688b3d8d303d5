/*
 * A schedule's slot fires at most once: two coordinators (the second waits on
 * locks/coordinator.lock and takes over when the first dies), each firing slot S through
 * spool/schedule/fired.py (begin, a keyed submit, record), a person's `spool schedule run`
 * (run now) beside them, and a `spool purge` of the slot's job, with a crash at any named step.
 *
 * State: the schedule's .firing and .fired records, the slot key's reservation, the slot's job
 * (its folders reduced to "exists"), the locks. Steps carry the same step comments as spool.pml.
 * Bug switches: BUG_PURGE_FORGETS (a purge that does not record the firing first);
 * BUG_FIRE_NO_RECHECK (the model found it in the code, since fixed: a coordinator finishing a
 * firing a crash left begun reads .fired, then submits; a purge between the two, recording the
 * firing, then removing the job and its key, let that submit make the slot a second job. As
 * built now, the submit reads .fired again under the key's lock when the key's job is gone:
 * spool.schedule.folder.fire's ``unless``).
 */

#ifndef MAXCRASH
#define MAXCRASH 1
#endif
#define NONE 0

byte firing;        /* .<name>.firing says S (1) or nothing (0) */
byte fired;         /* .<name>.fired says S (1) or nothing */
byte fired_job;     /* ... and its job */
byte keyres;        /* keys/<sha(schedule:name@S)>: the job id reserved, NONE */
bool job[4];        /* job i exists (in some folder) */
byte jobkey[4];     /* 1: the slot's key; 2: a run-now job */
byte nextid = 1;
byte slot_jobs;     /* jobs ever made for slot S (the property: at most 1) */
byte coordlock;     /* locks/coordinator.lock: the holder's pid, 0 free */
byte klock;         /* the slot key's lock */
byte jlock[4];
byte crashes;
byte busy;          /* processes that end (the person) still running */

#define LOCK(l) atomic { l == 0 -> l = _pid }
#define UNLOCK(l) l = 0
#define CRASH if :: crashes < MAXCRASH -> crashes++; goto crashed :: true fi

inline free_locks() {
  d_step {
    if :: coordlock == _pid -> coordlock = 0 :: else fi;
    if :: klock == _pid -> klock = 0 :: else fi;
    i = 1;
    do :: i < 4 -> if :: jlock[i] == _pid -> jlock[i] = 0 :: else fi; i++ :: else -> break od
  }
}

/* The keyed submit of the slot's job: one job per key (submission.submit). */
inline submit_slot() {
  LOCK(klock);
  if
  :: keyres != NONE && job[keyres] -> j = keyres
#ifndef BUG_FIRE_NO_RECHECK
  :: (keyres == NONE || !job[keyres]) && fired == 1 -> j = NONE   /* the record says S fired since we read it: nothing to finish */
#endif
  :: else ->
     /* @step spool.moves.submission.submit crash=coordinator:after-key-check : the slot due, its key not taken */
     atomic { j = nextid; nextid++ }
     CRASH;
     /* @step spool.moves.submission.reserve_key crash=coordinator:after-key : the slot's key reserved */
     keyres = j;
     CRASH;
     /* @step spool.moves.store.create_job crash=coordinator:after-commit : the slot's job in pending/ */
     atomic { job[j] = 1; jobkey[j] = 1; slot_jobs++ }
     CRASH
  fi;
  UNLOCK(klock);
  /* @step spool.moves.submission.submit crash=coordinator:after-submit : durable; the record still says "being fired" */
  CRASH
}

proctype Coordinator() {
  byte j, i;
start:
  /* @step runner.coordinator._coordinator_lock : waits on locks/coordinator.lock */
  LOCK(coordlock);
  do
  :: /* @step spool.schedule.fired.begin : S is due: .firing says S, durable enough (a hint) */
     fired == 0 && firing == 0 ->
     firing = 1;
     goto submit
  :: /* @step runner.scheduler : a firing a crash left begun: finished (the key makes it one job) */
     fired == 0 && firing == 1 ->
     goto submit
  :: fired == 1 -> break
  od;
  goto end;
submit:
  /* @step spool.schedule.fired.begin crash=coordinator:fire-after-begin : .firing says S, nothing submitted */
  CRASH;
  submit_slot();
  /* @step spool.schedule.fired.record crash=coordinator:fire-after-record : .fired says S and its job (durable) */
  atomic { fired = 1; fired_job = j; firing = 0 }
  CRASH;
  goto end;
crashed:
  free_locks();
end:
  if :: coordlock == _pid -> coordlock = 0 :: else fi
}

/* A person: `spool schedule run` (a job of its own, noted as the schedule's last firing), then
 * `spool purge` of the slot's job once it ended. */
proctype Person() {
  byte j, i;
  if
  :: /* @step spool.schedule.folder.run_now crash=submit:run-after-record,serve:run-after-record : its own job durable and noted as the last firing */
     atomic { j = nextid; nextid++; job[j] = 1; jobkey[j] = 2 }
     CRASH
  :: skip
  fi;
  if
  :: atomic { keyres != NONE && job[keyres] -> j = keyres }
     LOCK(jlock[j]);
#ifndef BUG_PURGE_FORGETS
     if
     :: fired == 0 ->
        /* @step spool.schedule.fired.record_before_purge crash=admin:purge-after-fired : the firing recorded first (durable) */
        atomic { fired = 1; fired_job = j; firing = 0 }
        CRASH
     :: else
     fi;
#endif
     /* @step spool.admin._purge_one : the job gone */
     job[j] = 0;
     UNLOCK(jlock[j]);
     /* @step spool.moves.submission.remove_key : its key's reservation too */
     LOCK(klock);
     if :: keyres == j -> keyres = NONE :: else fi;
     UNLOCK(klock)
  :: skip
  fi;
  goto end;
crashed:
  free_locks();
end:
  busy--
}

active proctype Properties() {
end:
  atomic { slot_jobs > 1 -> assert(slot_jobs <= 1) }   /* a slot fired at most once */
}

init {
  atomic {
    busy = 1;
    run Coordinator();
    run Coordinator();
    run Person()
  }
}
