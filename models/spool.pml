/*
 * spool's move protocol as built: submitters by key (one by one and submit_many), a user
 * dropping and hand-moving files, the coordinator (ingest, lease watch and expire, promote and
 * skip, reconcile's settle), fsck --repair (list the folders, repair keys/), a person's
 * cancel/requeue/purge, and workers (claim, heartbeat, complete, fail, release), with a crash
 * at any named step: the process stops, the kernel frees its flocks (a worker's liveness lock
 * too). A worker may also be stopped for good (SIGSTOP: its liveness lock stays held).
 *
 * State: the folders each job's name is in (bits), the user's files named like a job, the
 * key reservations, the results, the fields of a job file a decision reads (tries, attempt,
 * lease, reason), the flocks. The ledger is left out: every decision here reads the files
 * (a claim's ledger reservation is modelled as "a job whose own copy is in pending/").
 *
 * Every step that models code carries a comment the tests parse:
 *     @step <function> [crash=<role>:<step>[,<role>:<step>...]] [: what it does]
 * A step with crash=... is followed by CRASH: the process may stop right there.
 *
 * Bug switches (each reintroduces a bug the code once had or could have; each must give a
 * counterexample): BUG_FSCK_UNLINK, BUG_PAUSE_RENEWS, BUG_DROP_TAKES_PLACE, BUG_HAND_MOVED,
 * BUG_LOOKUP_ONE_LOOK (submit's key lookup without its second look under the job's lock: a
 * keyed submit misses a job moving leased/ -> pending/ and makes a second one; the model found
 * it in the code, which now looks again: submission.job_kept_now).
 */

#ifndef NJ
#define NJ 3            /* job ids the run may hand out */
#endif
#ifndef MAXCRASH
#define MAXCRASH 1      /* 1: one process, any of them, may crash once in a run; 0: none */
#endif
#ifndef MAXTRIES
#define MAXTRIES 2
#endif
/* Who takes part. A scene is one concern checked on its own; FULL is all of them (bitstate).
 * SUBMIT: keyed submits of key 0, one after the other; UNKEYED: the first may leave its key to default. */
#if defined(SCENE_KEYS)         /* keys/: submitters, submit_many, fsck --repair, purge, a keyed drop */
#define SUBMIT 1
#define UNKEYED 0
#define MANY 1
#define USER 1
#define FSCK 1
#define ADMIN 4
#ifndef WORKERS
#define WORKERS 2
#endif
#elif defined(SCENE_FSCK)       /* fsck --repair beside two submits of key 0, one after the other (no submit_many) */
#define SUBMIT 2
#define UNKEYED 0
#define MANY 0
#define USER 0
#define FSCK 1
#define ADMIN 0
#ifndef WORKERS
#define WORKERS 1
#endif
#elif defined(SCENE_MOVES)      /* the folders: a chain, drops named like jobs, hand moves, cancel/requeue/purge */
#define SUBMIT 0
#define UNKEYED 0
#define MANY 1
#define USER 6
#define FSCK 0
#define ADMIN 7
#ifndef WORKERS
#define WORKERS 2
#endif
#elif defined(SCENE_LEASES)     /* leases: one job (keyed or not), two workers (one may be stopped for good), pauses */
#define SUBMIT 1
#define UNKEYED 1
#define MANY 0
#define USER 0
#define FSCK 0
#define ADMIN 0
#ifndef WORKERS
#define WORKERS 2
#endif
#else                           /* FULL */
#define SUBMIT 1
#define UNKEYED 1
#define MANY 1
#define USER 7
#define FSCK 1
#define ADMIN 7
#ifndef WORKERS
#define WORKERS 2
#endif
#endif
#define NK 2            /* keys */
#define NONE 255
#define NJMAX 4         /* arrays are this long; the invariant is written out for 4 */

#define PEND 1
#define WAIT 2
#define LEAS 4
#define DONE 8
#define DEAD 16
#define TERM (DONE | DEAD)

byte in[NJMAX];        /* the folders holding a file named <j>.yaml */
bool drop[NJMAX];      /* a user's file pending/<j>.yaml (not the runner's copy; in[] has only those) */
bool reason[NJMAX];    /* the job file carries a dead reason */
byte result[NJMAX];    /* results/<j>.json: how many were linked (the property: at most 1) */
byte tries[NJMAX];
byte att[NJMAX];       /* the file's attempt: the fence */
bool lease[NJMAX];     /* the file records a lease for its attempt */
byte holder[NJMAX];    /* the worker (pid) the lease names */
bool beat[NJMAX];      /* the heartbeat counter changed since the coordinator last read it */
byte started[NJMAX];   /* attempts whose handler started, since the tries were last made fresh */
bool committed[NJMAX];
bool purged[NJMAX];
bool impostor[NJMAX];  /* the job's file holds a user's drop: the job was replaced */
byte jkey[NJMAX];      /* the job's key, NONE for a key left to default */
byte dep[NJMAX];       /* the job it depends on, NONE */
byte jlock[NJMAX];     /* locks/<j>.lock: the holder's pid, 0 free */
byte klock[NK];        /* a key's lock */
byte keyres[NK];       /* keys/<sha(k)>: the job id reserved, NONE */
bool alive[12];         /* a worker's liveness lock is held */
byte nextid;
byte crashes;
byte frozen;           /* workers stopped for good (at most 1) */
bool plaindrop;        /* pending/<name>.yaml: a user's drop with key 1, not yet ingested */
byte busy;             /* processes that end (submitters, user, fsck, admin) still running */
byte coord;            /* the coordinator's pid */

/* The runner's own copies of job j (a user's file named like it is drop[j], not in in[j]). */
#define RUN(j) in[j]

/* Every job committed is settled: done or dead alone, or purged. */
#define SETTLED(j) (!committed[j] || purged[j] || (!drop[j] && (in[j] == DONE || in[j] == DEAD && reason[j])))
#define ALLDONE (SETTLED(0) && SETTLED(1) && SETTLED(2) && SETTLED(3))

/* Pick a job id for which C(id) holds (C is one of the conditions below). */
#define PICK(j, C) if :: C(0) -> j = 0 :: C(1) -> j = 1 :: C(2) -> j = 2 :: (NJ > 3) && C(3) -> j = 3 fi
#define CLAIMABLE(x) (RUN(x) & PEND)
#define LEASED(x) (in[x] == LEAS)
#define WAITING(x) (RUN(x) == WAIT)
#ifdef LIVE
/* The liveness checks leave out the coordinator's looks at a waiting job with nothing to do.
 * The code's pass runs every duty in turn (advance, lease watch, reconcile every few seconds),
 * but the model's loop picks one duty at a time, and weak fairness over processes lets it pick
 * an idle look for ever while an irregular job (a move cut by a crash) waits for reconcile. */
#define ADVANCING(x) (WAITING(x) && (reason[x] || drop[x] || result[dep[x]] || (in[dep[x]] & DONE) || purged[dep[x]] || in[dep[x]] == DEAD))
#else
#define ADVANCING(x) WAITING(x)
#endif
#define IRREGULAR(x) (drop[x] || (in[x] & (in[x] - 1)) != 0 || ((in[x] == PEND || in[x] == WAIT) && (reason[x] || lease[x])) || (result[x] && in[x] == LEAS))
#ifdef BUG_HAND_MOVED
#define MOVED_BACK(x) 0   /* BUG: a pending file with a dead reason taken as an ordinary pending job */
#else
#define MOVED_BACK(x) reason[x]   /* recovery.moved_back_by_hand */
#endif
#define COMMITTED(x) committed[x]
#define DROPPABLE(x) (committed[x] && !drop[x] && !(in[x] & PEND) && !(in[x] & LEAS))
#define HANDMOVABLE(x) (committed[x] && in[x] == DEAD && !drop[x])

/* Locks: flock. TRYLOCK never blocks (the coordinator, a claim, fsck). */
#define LOCK(l) atomic { l == 0 -> l = _pid }
#define TRYLOCK(l, got) atomic { if :: l == 0 -> l = _pid; got = 1 :: else -> got = 0 fi }
#define UNLOCK(l) l = 0

/* A crash here: the process stops, the kernel frees every flock it held. Which process may
 * crash (once) is chosen at the start (init): the choice stays local, so a step that does not
 * crash interleaves with nothing (partial order reduction keeps the search small). */
#define CRASH if :: crash -> crash = 0; crashes++; goto crashed :: true fi

inline free_locks() {
  d_step {
    i = 0;
    do
    :: i < NJMAX -> if :: jlock[i] == _pid -> jlock[i] = 0 :: else fi; i++
    :: else -> break
    od;
    i = 0;
    do
    :: i < NK -> if :: klock[i] == _pid -> klock[i] = 0 :: else fi; i++
    :: else -> break
    od;
    alive[_pid] = 0
  }
}

/* folders_of + has_result: one look per folder, each a separate step (another process moves
 * the job between two looks), then results/. */
inline look(r, seen) {
  /* @step spool.moves.store.folders_of : looks in pending/, waiting/, leased/, done/, dead/, one after another, then results/ */
  seen = (in[r] & PEND) | drop[r];
  seen = seen | (in[r] & WAIT);
  seen = seen | (in[r] & LEAS);
  seen = seen | (in[r] & DONE);
  seen = seen | (in[r] & DEAD);
  seen = seen | result[r]
}

/* lookup_key: the kept job reserved under key k, or NONE. Caller holds the key's lock. */
inline lookup_key(k, found) {
  found = keyres[k];
  if
  :: found != NONE ->
     look(found, seen);
#ifndef BUG_LOOKUP_ONE_LOOK
     /* @step spool.moves.submission.lookup_key : not seen: looks again under the job's lock (busy: a move in flight, kept) */
     if
     :: seen == 0 ->
        TRYLOCK(jlock[found], got);
        if
        :: got -> look(found, seen); UNLOCK(jlock[found])
        :: else -> seen = 1
        fi
     :: else
     fi;
#endif
     if :: seen == 0 -> found = NONE :: else fi
  :: else
  fi
}

inline new_id(j) {
  atomic { if :: nextid < NJ -> j = nextid; nextid++ :: else -> j = NONE fi }
}

/* recovery.settle under the job's lock (copies_of first): a drop beside the job is ingested
 * under a new id, a hand-moved dead job is requeued, the more advanced of two runner copies
 * wins, a result the job earned finishes it, a claim that died before its rewrite spends the try. */
inline settle(j) {
  if
  :: drop[j] ->
#ifdef BUG_DROP_TAKES_PLACE
     /* @step spool.moves.recovery.copies_of : BUG: the drop counts as the job's copy (pending/ beats waiting/) */
     atomic {
       if
       :: in[j] == WAIT -> impostor[j] = 1; in[j] = PEND
       :: else   /* beside a more advanced copy: the drop is deleted */
       fi;
       drop[j] = 0
     }
#else
     /* @step spool.moves.recovery.copies_of : the user's file is a drop: ingested under a new id */
     drop[j] = 0
#endif
  :: else ->
     if
     :: result[j] && (in[j] & LEAS) && !(in[j] & DONE) && lease[j] ->
        /* @step spool.moves.outcomes.finish_done : a result the lease earned: leased/ -> done/ */
        atomic { in[j] = DONE; lease[j] = 0 }
     :: (in[j] & DONE) && (in[j] & ~DONE) -> in[j] = DONE; lease[j] = 0
     :: (in[j] & DEAD) && !(in[j] & DONE) && (in[j] & ~DEAD) -> atomic { in[j] = DEAD; reason[j] = 1; lease[j] = 0 }
     :: in[j] == LEAS && !lease[j] && !result[j] ->
        /* @step spool.moves.outcomes.count_lost_claim : a claim died before its rewrite: the try is spent */
        atomic {
          att[j]++; tries[j]++;
          if :: tries[j] >= MAXTRIES -> in[j] = DEAD; reason[j] = 1 :: else -> in[j] = PEND fi
        }
     :: (in[j] == PEND || in[j] == WAIT) && lease[j] && !reason[j] ->
        /* @step spool.moves.recovery.settle : a move back to pending/ cut short: the lease cleared, never past max_tries - 1 */
        atomic {
          lease[j] = 0;
          if :: tries[j] >= MAXTRIES -> tries[j] = MAXTRIES - 1 :: else fi;
          if :: started[j] > tries[j] -> started[j] = tries[j] :: else fi
        }
#ifndef BUG_HAND_MOVED
     :: (in[j] == PEND || in[j] == WAIT) && reason[j] ->
        /* @step spool.moves.recovery._finish_requeue crash=coordinator:requeue-by-hand-after-rename : moved back by hand: a requeue, fresh tries */
        if
        :: in[j] == PEND && dep[j] != NONE && !(in[dep[j]] & DONE) -> in[j] = WAIT; CRASH
        :: else
        fi;
        atomic { tries[j] = 0; started[j] = 0; reason[j] = 0; lease[j] = 0 }
#endif
     :: else
     fi
  fi
}

/* `spool submit --key K` (and the API's POST /v1/jobs, and a schedule's firing): one job.
 * k == NONE: a submit whose key is left to default (its id): no key lock, lookup or reservation. */
proctype Submit(byte k; bool crash) {
  byte j, found, seen, i; bool got;
  if
  :: k != NONE ->
     /* @step spool.moves.submission.lock_key : takes the key's lock */
     LOCK(klock[k]);
     /* @step spool.moves.submission.lookup_key : reads keys/<k>, looks for its job folder by folder */
     lookup_key(k, found);
     if :: found != NONE -> UNLOCK(klock[k]); goto done :: else fi
  :: else
  fi;
  new_id(j);
  if :: j == NONE -> if :: k != NONE -> UNLOCK(klock[k]) :: else fi; goto done :: else fi;
  /* @step spool.moves.submission.submit crash=submit:after-key-check,serve:after-key-check,coordinator:after-key-check : the key not taken, nothing written */
  CRASH;
  if
  :: k != NONE ->
     /* @step spool.moves.submission.reserve_key : keys/<k> -> j, durable (takes a dangling one over) */
     keyres[k] = j;
     /* @step spool.moves.submission.reserve_key crash=submit:after-key,serve:after-key,coordinator:after-key */
     CRASH
  :: else
  fi;
  /* @step spool.moves.store.create_job : tmp/ -> pending/<j> without replacing: the commit point */
  atomic { jkey[j] = k; in[j] = PEND; committed[j] = 1 }
  /* @step spool.moves.submission.submit crash=submit:after-commit,serve:after-commit,coordinator:after-commit */
  CRASH;
  if :: k != NONE -> UNLOCK(klock[k]) :: else fi;
  /* @step spool.moves.submission.submit crash=submit:after-submit,serve:after-submit,coordinator:after-submit : the id returned */
  CRASH;
done:
  busy--;
  goto end;
crashed:
  free_locks();
  busy--;
end:
  skip
}

/* Spool.submit_many([key 0, key 1 depending on the first]): keys locked in order, looked up,
 * staged and synced, reserved, each job renamed in, then the folders fsync'd and the locks let go. */
proctype SubmitMany(bool crash) {
  byte a, b, j0, j1, found, seen, i; bool got;
  /* @step spool.moves.batch.submit_many : locks the round's keys in order */
  LOCK(klock[0]);
  LOCK(klock[1]);
  /* @step spool.moves.batch.submit_many : looks up each key */
  lookup_key(0, found);
  a = found;
  lookup_key(1, found);
  b = found;
  j0 = NONE; j1 = NONE;
  if :: a == NONE -> new_id(j0) :: else fi;
  if :: b == NONE -> new_id(j1) :: else fi;
  /* @step spool.moves.batch.submit_many crash=submit:batch-after-sync : the round's files staged in tmp/ and synced */
  CRASH;
  /* @step spool.moves.batch.submit_many : each new key's reservation renamed into keys/, keys/ fsync'd */
  atomic { if :: j0 != NONE -> keyres[0] = j0 :: else fi; if :: j1 != NONE -> keyres[1] = j1 :: else fi }
  /* @step spool.moves.batch.submit_many crash=submit:batch-after-keys */
  CRASH;
  if
  :: j0 != NONE ->
     /* @step spool.moves.batch.submit_many : member 0 renamed into pending/ (its commit point) */
     atomic { jkey[j0] = 0; in[j0] = PEND; committed[j0] = 1; a = j0 }
     /* @step spool.moves.batch.submit_many crash=submit:batch-after-commit */
     CRASH
  :: else
  fi;
  if
  :: j1 != NONE && a != NONE ->
     /* @step spool.moves.batch.submit_many : member 1 renamed into waiting/ (pending/ when its dependency is done) */
     atomic {
       jkey[j1] = 1; dep[j1] = a; committed[j1] = 1;
       if :: (in[a] & DONE) -> in[j1] = PEND :: else -> in[j1] = WAIT fi
     }
     /* @step spool.moves.batch.submit_many crash=submit:batch-after-commit */
     CRASH
  :: else
  fi;
  UNLOCK(klock[1]);
  UNLOCK(klock[0]);
  /* @step spool.moves.batch.submit_many crash=submit:batch-after-submit : every member durable, the ids returned */
  CRASH;
  busy--;
  goto end;
crashed:
  free_locks();
  busy--;
end:
  skip
}

/* A user, through the folders only: a keyed drop, a file named like a job, `mv dead/X pending/`. */
proctype User() {
  byte j;
  if
#if USER & 1
  :: /* @step runner.coordinator.Coordinator._sort_landed : drops pending/<name>.yaml with key 1 */
     plaindrop = 1
#endif
#if USER & 2
  :: /* @step spool.moves.ingest.ingest : writes pending/<j>.yaml, named like job j, where no copy of j is */
     atomic { PICK(j, DROPPABLE); drop[j] = 1 }
#endif
#if USER & 4
  :: /* @step spool.moves.recovery.moved_back_by_hand : mv dead/<j>.yaml pending/ */
     atomic { PICK(j, HANDMOVABLE); in[j] = PEND }
#endif
  :: skip
  fi;
  busy--
}

/* The coordinator: one at a time; a crash is a takeover by the next one (its view starts empty). */
proctype Coordinator(bool crash) {
  bool watched[NJMAX];
  byte watch_att[NJMAX];
  byte j, i, k, found, seen, nj, pauses; bool got;
start:
  pauses = pauses;
  d_step { i = 0; do :: i < NJMAX -> watched[i] = 0; i++ :: else -> break od }
  do
  :: /* ingest a keyed drop (key 1) */
     plaindrop ->
     /* @step spool.moves.ingest.ingest : takes the drop's key lock, looks the key up */
     LOCK(klock[1]);
     lookup_key(1, found);
     if
     :: found != NONE -> plaindrop = 0; UNLOCK(klock[1])
     :: else ->
        new_id(nj);
        if
        :: nj == NONE -> plaindrop = 0  /* quarantined: beyond the model's ids */
        :: else ->
           keyres[1] = nj;
           LOCK(jlock[nj]);
           /* @step spool.moves.ingest.ingest crash=coordinator:ingest-after-rename : the drop renamed to pending/<new id>, not yet rewritten */
           atomic { plaindrop = 0; jkey[nj] = 1; in[nj] = PEND; committed[nj] = 1 }
           CRASH;
           UNLOCK(jlock[nj])
        fi;
        UNLOCK(klock[1]);
        /* @step spool.moves.ingest.ingest crash=coordinator:after-ingest */
        CRASH
     fi
  :: /* the lease watch reads job j's heartbeat counter */
     atomic { PICK(j, LEASED) }
     if
     :: !lease[j] ->
        /* @step runner.coordinator.Coordinator._first_look : a leased file with no lease: settled under its lock */
        TRYLOCK(jlock[j], got);
        if :: got -> settle(j); UNLOCK(jlock[j]) :: else fi
     :: lease[j] && !watched[j] || lease[j] && watch_att[j] != att[j] ->
        /* @step runner.coordinator.Coordinator._first_look : a lease seen first gets a fresh full term */
        atomic { watched[j] = 1; watch_att[j] = att[j]; beat[j] = 0 }
     :: lease[j] && watched[j] && watch_att[j] == att[j] && alive[holder[j]] && beat[j] ->
        beat[j] = 0   /* the counter changed: a new term */
     :: lease[j] && watched[j] && watch_att[j] == att[j] && (!alive[holder[j]] || !beat[j]) ->
        /* @step spool.moves.transitions.expire : its worker died, or no beat across a full term */
        TRYLOCK(jlock[j], got);
        if
        :: got && in[j] == LEAS && att[j] == watch_att[j] && lease[j] ->
           assert(_pid == coord);   /* a lease is expired only by the coordinator */
           if
           :: result[j] ->
              /* @step spool.moves.transitions._expire_locked : a result is there: finish_done instead */
              atomic { in[j] = DONE; lease[j] = 0 }
           :: !result[j] && tries[j] >= MAXTRIES ->
              /* @step spool.moves.outcomes.bury crash=coordinator:bury-after-rename : dead/ published, leased/ copy still there */
              atomic { in[j] = in[j] | DEAD; reason[j] = 1 }
              CRASH;
              atomic { in[j] = DEAD; lease[j] = 0 }
           :: !result[j] && tries[j] < MAXTRIES ->
              /* @step spool.moves.outcomes.retry_or_bury crash=coordinator:expire-after-rename,serve:expire-after-rename : leased/ -> pending/, not yet rewritten */
              in[j] = PEND;
              CRASH;
              lease[j] = 0
           fi;
           watched[j] = 0;
           UNLOCK(jlock[j]);
           /* @step spool.moves.transitions.expire crash=coordinator:after-expire,serve:after-expire */
           CRASH
        :: got && !(in[j] == LEAS && att[j] == watch_att[j] && lease[j]) ->
           UNLOCK(jlock[j])   /* the job moved on since the look: nothing to expire */
        :: else
        fi
     fi
  :: /* stopped (SIGSTOP), not busy: every lease gets a fresh term */
#ifdef BUG_PAUSE_RENEWS
     /* @step runner.pauses.PauseWatch.take : BUG: a long pass of its own taken for a pause */
     d_step { i = 0; do :: i < NJMAX -> watched[i] = 0; i++ :: else -> break od }
#else
     pauses < 1 ->
     /* @step runner.pauses.PauseWatch.take : a real pause (at most one a run) */
     d_step { pauses++; i = 0; do :: i < NJMAX -> watched[i] = 0; i++ :: else -> break od }
#endif
  :: /* advance_waiting: promote or skip a waiting job */
     atomic { PICK(j, ADVANCING) }
     TRYLOCK(jlock[j], got);
     if
     :: got && in[j] == WAIT && !reason[j] && !drop[j] && (result[dep[j]] || (in[dep[j]] & DONE)) ->
        /* @step spool.moves.chains.advance_waiting crash=coordinator:promote-after-rename : waiting/ -> pending/ */
        in[j] = PEND;
        CRASH
     :: got && in[j] == WAIT && !reason[j] && !drop[j] && !result[dep[j]] && (purged[dep[j]] || in[dep[j]] == DEAD) ->
        /* @step spool.moves.outcomes.bury crash=coordinator:bury-after-rename : skipped: its dependency died */
        atomic { in[j] = in[j] | DEAD; reason[j] = 1 }
        CRASH;
        in[j] = DEAD
     :: got && (in[j] != WAIT || reason[j] || drop[j]) -> settle(j)
     :: else
     fi;
     if :: got -> UNLOCK(jlock[j]) :: else fi
  :: /* reconcile: settle a job whose files a crash or a user left irregular */
     atomic { PICK(j, IRREGULAR) }
     /* @step spool.moves.recovery.reconcile : settles a job under its lock */
     TRYLOCK(jlock[j], got);
     if :: got -> settle(j); UNLOCK(jlock[j]) :: else fi
  :: /* quiet: every other process ended and every job is settled */
     busy == 0 && !plaindrop && ALLDONE -> break
  od;
  goto end;
crashed:
  free_locks();
  goto start;
end:
  skip
}

/* `spool fsck --repair`: lists the folders, then judges keys/ under the locks. */
proctype Fsck() {
  bool listed[NK];
  byte j, k, r, seen, i; bool got;
  /* @step spool.fsck.fsck : lists the folders: the keys its jobs have (stale from here on) */
  for (j : 0 .. NJ - 1) {
    /* @step spool.fsck.fsck : lists pending/, waiting/, leased/, done/ and dead/, one after another */
    seen = in[j] & PEND;
    seen = seen | (in[j] & WAIT);
    seen = seen | (in[j] & LEAS);
    seen = seen | (in[j] & (DONE | DEAD));
    if :: seen && jkey[j] != NONE -> listed[jkey[j]] = 1 :: else fi
  }
  for (k : 0 .. NK - 1) {
    if
    :: !listed[k] ->
       /* @step spool.fsck.keys.judge_reservation : under the key's lock */
       TRYLOCK(klock[k], got);
       if
       :: got ->
          r = keyres[k];
          if
          :: r != NONE ->
             /* @step spool.fsck.keys.job_kept : looks the job up by id in every folder */
             look(r, seen);
#ifndef BUG_FSCK_UNLINK
             if
             :: seen == 0 ->
                /* @step spool.fsck.keys.job_kept : not found: again under the job's lock */
                TRYLOCK(jlock[r], got);
                if :: got -> look(r, seen); UNLOCK(jlock[r]) :: else -> seen = 1 fi
             :: else
             fi;
#endif
             if
             :: seen == 0 ->
                /* @step spool.fsck.keys.judge_reservation : an orphaned reservation: unlinked */
                keyres[k] = NONE
             :: else
             fi
          :: else
          fi;
          UNLOCK(klock[k])
       :: else
       fi
    :: else
    fi
  }
  busy--
}

/* A person: `spool cancel`, `spool requeue` or `spool purge` of one job (each blocks on its lock). */
proctype Admin(bool crash) {
  byte j, k, i; bool got;
  if
#if ADMIN & 1
  :: atomic { PICK(j, COMMITTED) }
     LOCK(jlock[j]);
     if
     :: RUN(j) == PEND || RUN(j) == WAIT ->
        /* @step spool.admin.cancel crash=admin:bury-after-rename,serve:bury-after-rename : dead/ published, the old copy still there */
        atomic { in[j] = in[j] | DEAD; reason[j] = 1 }
        CRASH;
        in[j] = in[j] & ~(PEND | WAIT)
     :: else
     fi;
     UNLOCK(jlock[j])
#endif
#if ADMIN & 2
  :: atomic { PICK(j, COMMITTED) }
     LOCK(jlock[j]);
     if
     :: in[j] == DEAD && !drop[j] ->
        /* @step spool.admin.requeue crash=admin:requeue-after-rename,serve:requeue-after-rename : dead/ -> pending/ (waiting/), not yet rewritten */
        if :: dep[j] != NONE && !(in[dep[j]] & DONE) -> in[j] = WAIT :: else -> in[j] = PEND fi;
        CRASH;
        atomic { tries[j] = 0; started[j] = 0; reason[j] = 0 }
     :: else
     fi;
     UNLOCK(jlock[j])
#endif
#if ADMIN & 4
  :: atomic { PICK(j, COMMITTED) }
     LOCK(jlock[j]);
     if
     :: (in[j] == DONE || in[j] == DEAD) && !drop[j] ->
        /* @step spool.admin._purge_one crash=admin:purge-after-rename : the job file renamed into tmp/, its result still there */
        atomic { in[j] = 0; purged[j] = 1 }
        CRASH;
        result[j] = 0;
        UNLOCK(jlock[j]);
        /* @step spool.moves.submission.remove_key : the key's reservation, if still this job's */
        if
        :: jkey[j] != NONE ->
           k = jkey[j];
           LOCK(klock[k]);
           if :: keyres[k] == j -> keyres[k] = NONE :: else fi;
           UNLOCK(klock[k])
        :: else
        fi
     :: else -> UNLOCK(jlock[j])
     fi
#endif
  :: skip
  fi;
  busy--;
  goto end;
crashed:
  free_locks();
  busy--;
end:
  skip
}

/* `spool worker`: claims, runs, beats, and completes, fails or releases; or crashes, or is stopped. */
proctype Worker(bool crash) {
  byte j, a, stops, i; bool got;
  alive[_pid] = 1;
end_idle:
  do
  :: /* the ledger reserves a ready job: one whose own copy is in pending/ */
     atomic { PICK(j, CLAIMABLE) }
     /* @step spool.moves.claiming.claim_held crash=worker:claim-after-reserve,serve:claim-after-reserve : the ledger reserved j, the file still in pending/ */
     CRASH;
     atomic {
       TRYLOCK(jlock[j], got);
       if
       :: got && (in[j] != PEND || drop[j] || result[j] || lease[j] || MOVED_BACK(j)) ->
          /* @step spool.moves.claiming.claimable : not only in pending/ (or moved back by hand): settled instead */
          settle(j);
          UNLOCK(jlock[j]);
          got = 0
       :: else
       fi
     }
     if :: !got -> goto end_idle :: else fi;
     /* @step spool.moves.claiming._claim_with_lock_held crash=worker:claim-after-heartbeat,serve:claim-after-heartbeat : the new attempt's first heartbeat written */
     CRASH;
     /* @step spool.moves.claiming._claim_with_lock_held crash=worker:claim-after-rename,serve:claim-after-rename : pending/ -> leased/, the commit point; not yet rewritten */
     in[j] = LEAS;
     CRASH;
     if
     :: /* the server's claim for a remote worker: written whole before its attempt starts */
        /* @step spool.moves.claiming.as_claimed : rewritten: attempt+1, the try counted, the lease; the lock let go */
        atomic { att[j]++; tries[j]++; lease[j] = 1; holder[j] = _pid; beat[j] = 1; a = att[j]; UNLOCK(jlock[j]) }
        /* @step spool.moves.claiming.claim_held crash=worker:after-claim,serve:after-claim */
        CRASH;
        /* @step runner.attempt.loop.watch : the handler starts (under the lease it claimed) */
        atomic { if :: att[j] == a && in[j] == LEAS -> started[j]++ :: else fi }
     :: /* a worker's early claim: leased/ fsync'd (the file there counts the try), the handler
         * started under the job's lock, then the content written (spool.moves.claiming.Opening) */
        /* @step spool.moves.claiming.claim_held crash=worker:after-claim : counted, not yet written, the lock held */
        CRASH;
        /* @step runner.attempt.loop.watch : the handler starts before the claim's content is written */
        started[j]++;
        /* @step spool.moves.claiming.Opening.write crash=worker:claim-after-start : the handler may be running */
        CRASH;
        /* @step spool.moves.claiming.Opening.write : rewritten: attempt+1, the try counted, the lease; the lock let go */
        atomic { att[j]++; tries[j]++; lease[j] = 1; holder[j] = _pid; beat[j] = 1; a = att[j]; UNLOCK(jlock[j]) }
     fi;
     if
     :: /* @step spool.moves.transitions.heartbeat : the counter moves (a lost lease: no beat) */
        atomic { att[j] == a && in[j] == LEAS -> beat[j] = 1 }
#if WORKERS > 1
     :: atomic { frozen < 1 -> frozen++ }
        /* @step runner.worker : stopped for good (SIGSTOP): its liveness lock stays held */
end_frozen:
        false
#endif
     :: skip
     fi;
     if
     :: /* complete */
        /* @step spool.moves.transitions.complete crash=worker:complete-after-stage : the result staged in tmp/ */
        CRASH;
        /* @step spool.moves.transitions.complete : under the job's lock, the fence checked (LeaseLost: dropped; EEXIST: someone won) */
        atomic {
          LOCK(jlock[j]);
          if
          :: in[j] == LEAS && att[j] == a && lease[j] && result[j] == 0 -> result[j]++
          :: else -> UNLOCK(jlock[j])
          fi
        }
        if
        :: jlock[j] == _pid ->
           /* @step spool.moves.transitions.complete crash=worker:after-result,serve:after-result : results/<j>.json linked, the commit point */
           CRASH;
           /* @step spool.moves.outcomes.finish_done crash=worker:complete-after-move,serve:complete-after-move : done/ published, leased/ copy still there */
           in[j] = in[j] | DONE;
           CRASH;
           atomic { in[j] = DONE; lease[j] = 0; UNLOCK(jlock[j]) }
        :: else
        fi
     :: /* fail */
        /* @step spool.moves.transitions.fail : under the job's lock, the fence checked */
        atomic {
          LOCK(jlock[j]);
          if
          :: in[j] == LEAS && att[j] == a && lease[j] && !result[j] && tries[j] >= MAXTRIES ->
             in[j] = in[j] | DEAD; reason[j] = 1
          :: in[j] == LEAS && att[j] == a && lease[j] && !result[j] && tries[j] < MAXTRIES ->
             in[j] = PEND
          :: else -> UNLOCK(jlock[j])
          fi
        }
        if
        :: jlock[j] == _pid && (in[j] & DEAD) ->
           /* @step spool.moves.outcomes.bury crash=worker:bury-after-rename : dead/ published, leased/ copy still there */
           CRASH;
           atomic { in[j] = DEAD; lease[j] = 0; UNLOCK(jlock[j]) }
        :: jlock[j] == _pid && !(in[j] & DEAD) ->
           /* @step spool.moves.outcomes.retry_or_bury crash=worker:fail-after-rename : leased/ -> pending/, not yet rewritten */
           CRASH;
           atomic { lease[j] = 0; UNLOCK(jlock[j]) }
        :: else
        fi;
        /* @step spool.moves.transitions.fail crash=worker:after-fail */
        CRASH
     :: /* release at a graceful stop (once: `spool run` starts it again): the try given back */
        /* @step spool.moves.outcomes.give_back : under the job's lock, the fence checked: leased/ -> pending/ */
        atomic {
          stops < 1 -> stops++;
          LOCK(jlock[j]);
          if
          :: in[j] == LEAS && att[j] == a && lease[j] && !result[j] -> in[j] = PEND
          :: else -> UNLOCK(jlock[j])
          fi
        }
        if
        :: jlock[j] == _pid ->
           /* @step spool.moves.outcomes.give_back crash=worker:release-after-rename : leased/ -> pending/, the try not yet given back */
           CRASH;
           atomic { lease[j] = 0; tries[j]--; started[j]--; UNLOCK(jlock[j]) }
        :: else
        fi
     fi;
     d_step { a = 0; got = 0 }
  od;
crashed:
  /* `spool run` starts a worker again; its liveness lock is a new one (the old lease's counter decides) */
  free_locks();
  alive[_pid] = 1;
  goto end_idle
}

/* The safety properties, at every state. */
#define ONEKEY(k) ((jkey[0] == k && RUN(0) != 0) + (jkey[1] == k && RUN(1) != 0) + (jkey[2] == k && RUN(2) != 0) + (jkey[3] == k && RUN(3) != 0) <= 1)
#define JOBOK(j) ( \
  result[j] <= 1 \
  && !((in[j] & DONE) && (in[j] & DEAD)) \
  && !(result[j] && in[j] == DEAD) \
  && (!committed[j] || RUN(j) != 0 || purged[j]) \
  && started[j] <= tries[j] + (in[j] == LEAS && !lease[j]) \
  && tries[j] <= MAXTRIES \
  && !impostor[j])
#define INVARIANT (ONEKEY(0) && ONEKEY(1) && JOBOK(0) && JOBOK(1) && JOBOK(2) && JOBOK(3))

/* Which property failed, named in the trail. */
active proctype Properties() {
end:
  atomic {
    !(INVARIANT) ->
    assert(ONEKEY(0) && ONEKEY(1));   /* one job per key */
    assert(result[0] <= 1 && result[1] <= 1 && result[2] <= 1 && result[3] <= 1);   /* one result per job */
    assert(!impostor[0] && !impostor[1] && !impostor[2] && !impostor[3]);   /* no job replaced by a drop */
    assert(tries[0] <= MAXTRIES && tries[1] <= MAXTRIES && tries[2] <= MAXTRIES && tries[3] <= MAXTRIES);   /* no run past max_tries */
    assert(INVARIANT)   /* done xor dead; in no folder only after purge; a counted try for each attempt started */
  }
}

init {
  byte i, victim;
  atomic {
    i = 0;
    do :: i < NJMAX -> jkey[i] = NONE; dep[i] = NONE; i++ :: else -> break od;
    keyres[0] = NONE; keyres[1] = NONE;
    /* the one process that may crash (MAXCRASH 0: none) */
    victim = 0;
#if MAXCRASH > 0
    if
    :: victim = 1 :: victim = 2 :: victim = 3 :: victim = 4 :: victim = 5 :: victim = 6
    fi;
#endif
    busy = 0;
    coord = run Coordinator(victim == 1);
#if SUBMIT
    busy++;
#if UNKEYED
    if   /* keyed, or its key left to default */
    :: run Submit(0, victim == 2)
    :: run Submit(NONE, victim == 2)
    fi;
#else
    run Submit(0, victim == 2);
#endif
#if SUBMIT > 1
    busy++; run Submit(0, victim == 3);   /* the key's second submit */
#endif
#endif
#if MANY
    busy++; run SubmitMany(victim == 3);
#endif
#if USER
    busy++; run User();
#endif
#if FSCK
    busy++; run Fsck();
#endif
#if ADMIN
    busy++; run Admin(victim == 4);
#endif
    run Worker(victim == 5);
#if WORKERS > 1
    run Worker(victim == 6)
#endif
  }
}

/* Under weak fairness every job accepted ends done or dead (or is purged). */
ltl live { <> [] ALLDONE }
