/* Direct hand-over in SQL lease mode, PostgreSQL's protocol (AutocommitOps, one clock
   reading per transaction: now(), its start, taken BEFORE the name's advisory lock is granted).

   Today (unflagged) a release is one autocommit DELETE of the holder's row plus a NOTIFY; every waiter
   wakes and runs a try of the acquire (sql_lease_statement.pml, ONE_CLOCK: lock; stale-row DELETEs; the
   guarded INSERT: no live holder and no live queue entry ahead; else join or refresh the queue entry,
   deadline t + WTTL). HANDOVER: the release is one transaction that takes the name's lock, deletes the
   rows expired at its clock (as an acquire does), deletes its own row and, if no live holder is left,
   promotes the head of the queue (the live entry with the lowest seq): it INSERTs a holder row for that
   waiter whose lease end is the waiter's QUEUE DEADLINE (not t + TTL: a waiter that died while queued
   must not hold longer than its entry would have blocked the queue, F12), deletes the entry and NOTIFYs.
   The woken waiter runs its try as before; the try finds its own row live and CONFIRMS it: UPDATE ... SET
   expires_at = t + TTL WHERE token = me AND expires_at > t, so its local lease (send time + TTL - MARGIN)
   starts no later than the server's.

   One exclusive name. H (row 0) holds at 0 (lease end TTL) and releases once, or crashes (its row
   expires). Waiters W1, W2 (rows 1, 2) are queued at 0 in that order (deadline WTTL, last try sent at 0)
   and may crash between tries (then their rows stay until they expire). A waiter whose try was refused
   waits for its NOTIFY or polls at any time. Time is a tick counter; any step may be delayed by any number
   of ticks. Each holder's lease clock fires at its deadline whatever is in flight. Checked in every state:
     told:      no two processes believe they hold at once
     exclusion: never two committed live holder rows
     dead:      a crashed waiter's promoted row ends by its queue deadline (last try's send + WTTL)
   Variants (-D):
     HANDOVER      the release promotes the queue head (above)
     NO_EXTEND     the woken waiter's try takes its promoted row as it is (no confirm UPDATE): its local
                   lease (send + TTL - MARGIN) may outlive the row (lease end = queue deadline)
     PROMOTE_TTL   the promoted row's lease end is the release's t + TTL instead of the queue deadline
     NO_LOCK       the release promotes without taking the name's advisory lock
     NO_STALE_DELETE  the release promotes without first deleting the rows expired at its clock
     TRUST         the woken waiter holds on the NOTIFY itself, before any round trip, with the local
                   deadline (last answered try's send time) + WTTL - MARGIN (no try in flight: its entry's
                   deadline is that try's clock + WTTL >= it), then confirms with a try as above
     TRUST_INFLIGHT  TRUST also while a refreshing try is in flight, with that try's send time
     ONE_STATEMENT_RELEASE  the release is ONE statement without the name's lock: its snapshot and clock at
                   its start; then its DELETEs (each on the latest committed row: our own, the rows expired
                   at its clock) and the promotion of the snapshot's head entry (its latest deadline, if the
                   entry is still there), only if our row was live at its clock, the snapshot showed no other
                   live holder and the DELETE removed every row the snapshot saw expired
     KEEP          a waiter also refreshes its queue entry (once) with the store's batched keep (no name lock), and
                   with STAMP the deadline a keep's answer reports counts as its last write's (with the
                   keep's send time), as a refused try's does
     RENEW_CONFIRM with TRUST: the believer confirms with the store's renewal (UPDATE ... SET expires_at =
                   t + TTL WHERE token = me AND expires_at > t, autocommit: no name lock, no stale-row DELETE)
                   instead of a try; what the code does (its first renewal is due within a third of the lease)
     STAMP         with TRUST: the promotion's NOTIFY carries the lease end it gave the row (the waiter's
                   queue deadline then), and a refused try's answer the queue deadline it wrote (its clock
                   + WTTL, RETURNed by its statement). The waiter trusts a NOTIFY only if its stamp equals
                   the deadline of its last answered refused try, with that try's send time + WTTL - MARGIN
                   as the local deadline; with TRUST_INFLIGHT also while a later try is in flight, but still
                   with the last answered try's deadline and send time, never the in-flight try's
   Results (spin 6.5.2, TTL 3, WTTL 2, MARGIN 1, MAXT 8; each a few seconds to minutes on a loaded 2-core VM;
   the TRUST lines up to 160 million states, 6 minutes and 16 GB of memory):
     (today), HANDOVER ..................................... told, exclusion, dead: hold
     HANDOVER -DNO_EXTEND .................................. told VIOLATED (the local lease outlives the row)
     HANDOVER -DPROMOTE_TTL ................................ dead VIOLATED (F12: a dead waiter holds a TTL)
     HANDOVER -DNO_STALE_DELETE ............................ exclusion VIOLATED: a try whose clock is older
       than the release's confirms (revives) its own row that the release saw expired and passed over
     HANDOVER -DNO_LOCK .................................... holds HERE ONLY: each statement is one atomic
       step in this model; under READ COMMITTED two snapshots miss each other's uncommitted INSERT
       (sql_lease_statement.pml -DNO_ADVISORY is violated), so the release takes the name's lock
     HANDOVER -DTRUST ...................................... told VIOLATED: a stale NOTIFY. Before the waiter
       sees it, its next try (clock >= the promoted row's end) deletes that row as stale and is refused
       (the other waiter took the lock); the old NOTIFY then passes the time test with that try's send time
     HANDOVER -DTRUST -DTRUST_INFLIGHT ..................... told VIOLATED (trail: the promoted row ends at
       the last ANSWERED try's deadline, before the local deadline in-flight send + WTTL - MARGIN)
     HANDOVER -DTRUST -DSTAMP .............................. told, exclusion, dead: hold
     HANDOVER -DTRUST -DSTAMP -DTRUST_INFLIGHT ............. told, exclusion, dead: hold; with the in-flight
       try's send time for the local deadline instead (checked by editing that line) told VIOLATED, as above
     HANDOVER -DTRUST -DSTAMP -DRENEW_CONFIRM .............. told, exclusion, dead: hold (155 million states, 4
       minutes, 13 GB). Sensitivity: the renewal's local deadline set past the row's end (sent + TTL + 1
       instead of sent + TTL - MARGIN, checked by editing that line): told VIOLATED
     HANDOVER -DONE_STATEMENT_RELEASE ...................... told, exclusion, dead: hold. Sensitivity: without
       the condition that our own row was live at the release's clock, exclusion VIOLATED (a try that took
       the name over after our lease ran out, unseen by the release's snapshot, and the promoted waiter)
     HANDOVER -DONE_STATEMENT_RELEASE -DTRUST -DSTAMP -DRENEW_CONFIRM ... told, exclusion, dead: hold (6
       minutes): what the code does
     HANDOVER -DONE_STATEMENT_RELEASE -DTRUST -DSTAMP -DRENEW_CONFIRM -DKEEP ... NOT COMPLETED: no violation in
       335 million states with MAXT 7 (pan -DCOLLAPSE, stopped at 17.5 GB of 23) nor in 355 million states of a
       bitstate search (-DBITSTATE -w34, 7 minutes) with MAXT 8, nor in 224 million states with MAXT 7 and only
       W1 keeping; a full search needs more memory than the project's VM has (or a smaller model)
   Table (check.sh runs each line):
     (today)
     -DHANDOVER
     -DHANDOVER -DNO_EXTEND
     -DHANDOVER -DPROMOTE_TTL
     -DHANDOVER -DNO_LOCK
     -DHANDOVER -DNO_STALE_DELETE
     -DHANDOVER -DTRUST
     -DHANDOVER -DTRUST -DTRUST_INFLIGHT
     -DHANDOVER -DTRUST -DSTAMP
     -DHANDOVER -DTRUST -DSTAMP -DTRUST_INFLIGHT
     -DHANDOVER -DTRUST -DSTAMP -DRENEW_CONFIRM
     -DHANDOVER -DONE_STATEMENT_RELEASE
     -DHANDOVER -DONE_STATEMENT_RELEASE -DTRUST -DSTAMP -DRENEW_CONFIRM
*/
#define TTL 3
#define WTTL 2
#define MARGIN 1
#define MAXT 8

byte now = 0;
byte exp[3];          /* committed holder rows: lease end, 0 = no row */
byte qexp[3];         /* committed queue entries of W1, W2: deadline, 0 = none (seq: W1 before W2) */
bool holds[3];        /* each process's belief */
byte dl[3];           /* each believer's local deadline; 0 when it does not believe (fewer states) */
byte namelock = 0;    /* the name's pg_advisory_xact_lock: 0 free, else holder id + 1 */
bool notified[3];     /* a NOTIFY for this waiter's promotion, not yet seen */
bool promoted[3];     /* its row was made by a promotion and not yet confirmed */
bool dead[3];
byte bound[3];        /* a waiter's last try's send time + WTTL: its queue deadline at most */
byte pstamp[3];       /* STAMP: the lease end its NOTIFY echoes (what the promotion gave its row); 0 once seen */

#define DUE(i) (holds[i] && now >= dl[i])
#define LIVEROWS(t) ((exp[0] > t -> 1 : 0) + (exp[1] > t -> 1 : 0) + (exp[2] > t -> 1 : 0))
proctype clock() { do :: now < MAXT && !DUE(0) && !DUE(1) && !DUE(2) -> now++ :: now == MAXT -> break od }
proctype timers() {
end: do
  :: atomic { DUE(0) -> holds[0] = 0 }
  :: atomic { DUE(1) -> holds[1] = 0; dl[1] = 0 }
  :: atomic { DUE(2) -> holds[2] = 0; dl[2] = 0 }
  od
}

proctype holder() {
  byte t0;
#ifdef ONE_STATEMENT_RELEASE
  byte snap, stale, deleted, head; bool own;
#endif
  if
  :: skip                                             /* crashes: its row expires at TTL */
  :: holds[0] = 0;                                    /* release: stop believing first */
#ifdef ONE_STATEMENT_RELEASE
     /* ONE statement, no name lock. Its snapshot and clock (now()) at its start: */
     atomic { t0 = now;
              snap = (exp[1] > t0 -> 1 : 0) + (exp[2] > t0 -> 1 : 0);
              stale = (exp[1] != 0 && exp[1] <= t0 -> 1 : 0) + (exp[2] != 0 && exp[2] <= t0 -> 1 : 0);
              head = (qexp[1] > t0 -> 1 : (qexp[2] > t0 -> 2 : 0)) };
     /* its writes, each DELETE on the latest committed row, and COMMIT: our row (was it live at t0?); the
        holder rows expired at t0; the head's entry (if still there, its latest deadline); the promotion only if our
        row was live, the snapshot showed no other live holder and the DELETE removed every row the
        snapshot saw expired */
     atomic {
       own = (exp[0] > t0); exp[0] = 0; deleted = 0;
       if :: exp[1] != 0 && exp[1] <= t0 -> exp[1] = 0; promoted[1] = 0; deleted++ :: else fi;
       if :: exp[2] != 0 && exp[2] <= t0 -> exp[2] = 0; promoted[2] = 0; deleted++ :: else fi;
       if
       :: own && snap == 0 && deleted == stale && head != 0 && qexp[head] != 0 ->
            exp[head] = qexp[head];
#ifdef STAMP
            pstamp[head] = exp[head];
#endif
            qexp[head] = 0; promoted[head] = 1; notified[head] = 1
       :: else
       fi }
#elif defined(HANDOVER)
     t0 = now;                                        /* now(): the transaction's start */
#ifndef NO_LOCK
     atomic { namelock == 0 -> namelock = 1 };
#endif
#ifndef NO_STALE_DELETE
     atomic {                                         /* the stale-row DELETEs, as an acquire's */
       if :: exp[1] != 0 && exp[1] <= t0 -> exp[1] = 0; promoted[1] = 0 :: else fi;
       if :: exp[2] != 0 && exp[2] <= t0 -> exp[2] = 0; promoted[2] = 0 :: else fi;
       if :: qexp[1] != 0 && qexp[1] <= t0 -> qexp[1] = 0 :: else fi;
       if :: qexp[2] != 0 && qexp[2] <= t0 -> qexp[2] = 0 :: else fi }
#endif
     atomic {                                         /* DELETE mine; promote the head; NOTIFY; COMMIT */
       exp[0] = 0;
       if
       :: LIVEROWS(t0) == 0 && qexp[1] > t0 ->
#ifdef PROMOTE_TTL
            exp[1] = t0 + TTL;
#else
            exp[1] = qexp[1];
#endif
#ifdef STAMP
            pstamp[1] = exp[1];
#endif
            qexp[1] = 0; promoted[1] = 1; notified[1] = 1
       :: LIVEROWS(t0) == 0 && qexp[1] <= t0 && qexp[2] > t0 ->
#ifdef PROMOTE_TTL
            exp[2] = t0 + TTL;
#else
            exp[2] = qexp[2];
#endif
#ifdef STAMP
            pstamp[2] = exp[2];
#endif
            qexp[2] = 0; promoted[2] = 1; notified[2] = 1
       :: else
       fi;
       if :: namelock == 1 -> namelock = 0 :: else fi }
#else
     exp[0] = 0                                       /* autocommit DELETE; NOTIFY (waiters poll here) */
#endif
  fi
}

/* A waiter's try: lock; stale DELETEs; then one statement: confirm its promoted row, or the guarded
   INSERT, or join/refresh the queue; COMMIT; the reply. */
#ifdef STAMP
#define STAMPOK (pstamp[i] == lastq)
#else
#define STAMPOK 1
#endif
proctype waiter(byte i) {
  byte sent, t0, last, lastq; bool ok, trusted;
#ifdef KEEP
  byte ksent, kq; bool kok, kept;
#endif
  last = 0;
#ifdef STAMP
  lastq = WTTL;                                       /* the queue deadline its last refused try wrote */
#endif
  do
  :: atomic { now < MAXT && !dead[i] && (!holds[i] || trusted) -> skip };
     if
#ifdef TRUST
     :: atomic { notified[i] && !trusted -> notified[i] = 0;          /* the NOTIFY, before any round trip */
                 if :: STAMPOK && now < last + WTTL - MARGIN -> holds[i] = 1; dl[i] = last + WTTL - MARGIN; trusted = 1
                    :: else fi;
                 pstamp[i] = 0 }
#ifdef RENEW_CONFIRM
        if :: trusted -> goto renew :: else -> skip fi
#else
        if :: trusted -> goto try :: else -> skip fi
#endif
#endif
     :: atomic { notified[i] = 0; pstamp[i] = 0 }      /* woken, or polling */
try:    atomic { sent = now; t0 = now; bound[i] = now + WTTL };   /* the try is sent; now() */
#ifdef TRUST_INFLIGHT
        if
        :: atomic { notified[i] && !trusted -> notified[i] = 0;
#ifdef STAMP
                    if :: STAMPOK && now < last + WTTL - MARGIN -> holds[i] = 1; dl[i] = last + WTTL - MARGIN; trusted = 1
#else
                    if :: now < sent + WTTL - MARGIN -> holds[i] = 1; dl[i] = sent + WTTL - MARGIN; trusted = 1
#endif
                       :: else fi;
                    pstamp[i] = 0 }
        :: skip
        fi;
#endif
        atomic { namelock == 0 -> namelock = i + 1 };
        atomic {                                      /* the stale-row DELETEs */
          if :: exp[0] != 0 && exp[0] <= t0 -> exp[0] = 0 :: else fi;
          if :: exp[1] != 0 && exp[1] <= t0 -> exp[1] = 0; promoted[1] = 0 :: else fi;
          if :: exp[2] != 0 && exp[2] <= t0 -> exp[2] = 0; promoted[2] = 0 :: else fi;
          if :: qexp[1] != 0 && qexp[1] <= t0 -> qexp[1] = 0 :: else fi;
          if :: qexp[2] != 0 && qexp[2] <= t0 -> qexp[2] = 0 :: else fi }
        atomic {                                      /* the third statement, and COMMIT */
          if
          :: exp[i] > t0 ->                           /* ours already (promoted): confirm */
#ifndef NO_EXTEND
               exp[i] = t0 + TTL;
#endif
               promoted[i] = 0; ok = 1
          :: exp[i] <= t0 && LIVEROWS(t0) == 0 && (i == 1 || qexp[1] <= t0) ->
               exp[i] = t0 + TTL; qexp[i] = 0; ok = 1  /* the guarded INSERT */
          :: else -> qexp[i] = t0 + WTTL; ok = 0      /* join or refresh the queue */
          fi;
          namelock = 0 }
        atomic {                                      /* the reply */
          if
          :: ok && now < sent + TTL - MARGIN -> holds[i] = 1; dl[i] = sent + TTL - MARGIN
          :: ok && now >= sent + TTL - MARGIN -> holds[i] = 0; dl[i] = 0      /* too late: no grant */
#ifdef STAMP
          :: !ok -> holds[i] = 0; dl[i] = 0; last = sent; lastq = t0 + WTTL   /* the statement RETURNs its deadline */
#else
          :: !ok -> holds[i] = 0; dl[i] = 0; last = sent
#endif
          fi;
          trusted = 0 }
        if :: holds[i] -> break :: else fi            /* holds until its lease ends; never releases here */
     fi
#ifdef KEEP
  :: atomic { now < MAXT && !dead[i] && !holds[i] && !trusted && !kept -> ksent = now; bound[i] = now + WTTL;
              kept = 1 };                             /* one keep per waiter (the state space) */
     /* the store's batched keep, sent (its now() then): UPDATE ... SET expires_at = now() + WTTL WHERE
        token = me AND expires_at > now(), no name lock; its COMMIT; its answer (the deadline it wrote) */
     atomic { if :: qexp[i] > ksent -> qexp[i] = ksent + WTTL; kq = qexp[i]; kok = 1 :: else -> kok = 0 fi };
     atomic { if :: kok -> last = ksent; lastq = kq :: else fi; kok = 0; kq = 0; ksent = 0 }
#endif
  :: atomic { !dead[i] && !holds[i] -> dead[i] = 1 }; break   /* crashes between tries */
  :: now == MAXT -> break
  od;
#ifdef RENEW_CONFIRM
  goto done;
renew:                                                /* the renewal: no name lock, no stale-row DELETE */
  atomic { sent = now };                              /* sent */
  atomic { t0 = now;                                  /* now(), its UPDATE and COMMIT */
           if :: exp[i] > t0 -> exp[i] = t0 + TTL; promoted[i] = 0; ok = 1 :: else -> ok = 0 fi };
  atomic { if :: ok && holds[i] && now < sent + TTL - MARGIN -> dl[i] = sent + TTL - MARGIN
              :: else fi;                             /* refused or late: its lease clock ends it at dl */
           trusted = 0 };
done: skip
#endif
}

init {
  atomic {
    exp[0] = TTL; holds[0] = 1; dl[0] = TTL - MARGIN;
    qexp[1] = WTTL; qexp[2] = WTTL; bound[1] = WTTL; bound[2] = WTTL;
    run clock(); run timers(); run holder(); run waiter(1); run waiter(2)
  }
}

active proctype monitor() {
  assert(!(holds[0] && holds[1]) && !(holds[0] && holds[2]) && !(holds[1] && holds[2]));   /* told */
  assert(!(exp[0] > now && exp[1] > now) && !(exp[0] > now && exp[2] > now) &&
         !(exp[1] > now && exp[2] > now));                                                 /* exclusion */
  assert(!(dead[1] && promoted[1] && exp[1] > bound[1]) &&
         !(dead[2] && promoted[2] && exp[2] > bound[2]))                                   /* dead */
}
