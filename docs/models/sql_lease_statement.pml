/* This is the protocol of PostgreSQL lease mode on every connection (AutocommitOps in
   src/distlock/_backends/sql/lease_autocommit.py): the ONE_CLOCK design with BLIND (the first apply is sent without a
   read: one round trip for a free name; its answer carries the read made under the name's lock, for the
   next apply). Each apply is three statements in one transaction, sent as ONE simple-protocol Query (the
   server reads it whole before it takes the lock, so a client that goes silent mid-send holds nothing; the
   order of the statements, which is what the model checks, is the pipeline's it replaced): the advisory
   lock; both stale-row DELETEs (one statement:
   the holders' DELETE is the one the model has, the queue's is bookkeeping); then, in a later statement,
   the guarded INSERT with the queue bookkeeping and the answer's read as data-modifying CTEs. Renewals
   are one autocommit UPDATE (now(): its own transaction's start). RENEW_EARLY_CLOCK was written for a
   MySQL batch renewal that 0.2 does not ship (MySQL/MariaDB run the transactional protocol of
   sql_lease.pml, measured faster there). (Until 0.2 only statement pooling ran this protocol.)

   SQL lease table through statement pooling: every statement is its own transaction and BEGIN is refused,
   so the acquire cannot hold the name's pg_advisory_xact_lock while Python decides (Ops.acquire). A
   simple-protocol Query of several statements separated by ';' still runs as ONE implicit transaction (it
   ends idle, so the pooler accepts it), but nothing can be decided in Python inside it. The protocol:
     1. read   (one autocommit statement): the name's holders and queue, and the database's clock;
     2. decide in Python (arbiter.decide, the rule of today);
     3. apply  (one Query, an implicit transaction; READ COMMITTED: each statement takes its own snapshot):
          SELECT pg_advisory_xact_lock(a, b);
          DELETE stale holder rows WHERE expires_at <= clock    (waits for a renewal's row lock, re-evaluates);
          INSERT our holder row ... WHERE <the name's live holders (token, mode) and queue are still what 1
          read> RETURNING fence;                                 (0 rows: nothing granted, back to 1)
     renew:   UPDATE ... SET expires_at = clock+ttl WHERE token = me AND expires_at > clock (autocommit);
     release: DELETE ... WHERE token = me (autocommit).
   One exclusive name; H1 (row 0) holds and renews or releases; acquirers A1, A2 (rows 1, 2) each take it
   once by 1-3 and hold without renewing. Time is a tick counter; any step of any process may be delayed by
   any number of ticks (a pooler's queue, a slow link); each holder's lease clock fires lost at
   sent + TTL - MARGIN whatever is in flight (the store's lease clock, given), and a grant whose reply comes
   after that moment is no grant (the code abandons it; here its row is left to expire). Checked in every
   reachable state:
     told:      no two processes believe they hold at once (H1 is told before anyone else holds)
     exclusion: never two committed live holder rows
   Unflagged: the design above; each statement compares with its own clock reading (clock_timestamp(), the
   dialect's now today), and a renewal's UPDATE commits in the same step (autocommit).
   Variants (-D):
     RENEW_COMMIT_DELAYED  the autocommit renewal holds its row lock while its commit is still to come (WAL
                           flush, a synchronous replica): time may pass between the UPDATE and its COMMIT
     ABORTS                the server drops one in-flight call, its client never hears back (half-open): H1's
                           renewal (before it ran: never runs; after the UPDATE: rolled back; after the
                           COMMIT: the reply is lost), or an acquirer's apply (before COMMIT: rolled back;
                           after: the reply is lost, the row stays, the acquirer hears nothing)
     NOMARGIN              MARGIN 0: the holder's deadline is the server's lease end (stands for a server
                           clock faster than the margin allows, or a late timer)
     ONE_CLOCK             the apply reads the clock once (now(): the implicit transaction's start) and its
                           DELETE, guard and INSERT all compare with that reading
     LOCKING_READ          the apply locks the name's holder rows (SELECT ... FOR UPDATE) before its guard
     NO_GUARD              the INSERT has no guard (inserts whatever the read decided)
     NO_ADVISORY           no pg_advisory_xact_lock statement in the apply
     NO_DELETE             no stale-row DELETE in the apply (the guard alone; stale rows left to the sweep)
     ONE_SNAPSHOT          the DELETE and the guarded INSERT in one statement (a data-modifying CTE): the
                           guard sees the snapshot taken before the DELETE waited
     ONE_STATEMENT         the whole apply one statement (the advisory lock in a CTE too): the guard's
                           snapshot is taken before the advisory lock is granted
     RECHECK_COUNT         with ONE_SNAPSHOT/ONE_STATEMENT: the guard also requires the DELETE to have removed
                           every row the statement's snapshot saw expired (today's recheck, in SQL)
     BLIND                 an acquirer's first apply is sent without a read (it expects a free name)
     RENEW_EARLY_CLOCK     the renewal reads its clock in a step before its UPDATE runs and compares with it
     ONE_ACQUIRER          only A1 (no acquire-vs-acquire race)
     ONLY_TOLD, ONLY_EXCLUSION  check one property alone (spin stops at the first violation)
   Results (spin 6.5.2, TTL 3, MARGIN 1, MAXT 9; states stored and seconds per run on a loaded 2-core VM;
   "(today)" in the table is the unflagged design):
     variant                                                          told / exclusion      states, s
     the design, unflagged / RENEW_COMMIT_DELAYED / ABORTS / both ...... holds / holds          3.4M-11.3M, 2-9
     NOMARGIN -DRENEW_COMMIT_DELAYED ................................... VIOLATED / VIOLATED   (each alone)
       told: as today's protocol (sql_lease.pml), a margin > 0 is needed. Exclusion is NEW (today's
       protocol keeps it with MARGIN 0), and needs no second acquirer: A reads H1's row expired while
       renewal k is in flight; k commits; A's DELETE (clock t) finds the row live and keeps it; H1's reply
       to k arrives at its deadline = the old lease end (no margin) and H1 sends renewal k+1, which updates
       the row and waits for its COMMIT; A's guard (clock t' > t) finds the row expired in its snapshot
       and inserts; k+1 commits: two live rows. With a margin > 0, H1 hears k's reply only before the old
       lease end, so k committed before it and A's read would have seen k: no k+1 is in flight then. So
       the table's exclusion rests on the holder's clock keeping within the margin.
     ONE_CLOCK (also -DNOMARGIN -DRENEW_COMMIT_DELAYED -DABORTS) ........ holds / holds          2.3M-8.8M, 1-7
       (told not checked with NOMARGIN): one clock reading for the DELETE and the guard closes it; the
       DELETE waits for whatever renewal might make a row live at that reading.
     LOCKING_READ (also -DNOMARGIN) .................................... holds / holds          6.5M-13.2M, 5-12
       closes it too, but every acquire then holds the row locks of all the name's holders (renewals wait).
     NO_GUARD .......................................................... exclusion VIOLATED     1.4M, 1
       A1 and A2 both read the name free; each apply inserts in turn under the lock.
     NO_GUARD -DONE_ACQUIRER ........................................... holds                  0.1M, 0.2
     NO_GUARD -DONE_ACQUIRER -DRENEW_COMMIT_DELAYED .................... exclusion VIOLATED     0.1M, 0.2
       the renewal's COMMIT lands after A's read: the DELETE waits, keeps the renewed row, A inserts.
     NO_ADVISORY ....................................................... exclusion VIOLATED     5.3M, 3
       both guards pass on snapshots that do not hold the other's uncommitted INSERT.
     NO_ADVISORY -DONE_ACQUIRER -DRENEW_COMMIT_DELAYED -DABORTS ......... holds                  0.5M, 0.4
       (the lock orders acquires with acquires; renewals are ordered by the row lock)
     NO_DELETE ......................................................... holds                  3.1M, 2
     NO_DELETE -DRENEW_COMMIT_DELAYED (also with ONE_CLOCK) ............ exclusion VIOLATED     0.9M-1.3M, 1
       the guard reads the in-flight renewal's old row version; nothing waits for its COMMIT.
     ONE_SNAPSHOT ...................................................... holds                  2.6M, 2
     ONE_SNAPSHOT -DRENEW_COMMIT_DELAYED ............................... exclusion VIOLATED     1.1M, 1
       the DELETE waits and keeps the renewed row, but the guard in the same statement sees the snapshot
       from before that COMMIT.
     ONE_SNAPSHOT -DRECHECK_COUNT -DRENEW_COMMIT_DELAYED -DABORTS ....... holds / holds          9.7M, 8
     ONE_STATEMENT -DRECHECK_COUNT ..................................... exclusion VIOLATED     2.6M, 2
       A2's snapshot is taken before it waits for the lock, so it misses A1's committed INSERT.
     ONE_CLOCK -DBLIND (also -DRENEW_COMMIT_DELAYED -DABORTS, also -DRENEW_EARLY_CLOCK) ... holds / holds    39-73 s
     ONE_CLOCK -DBLIND -DRENEW_EARLY_CLOCK -DNOMARGIN -DRENEW_COMMIT_DELAYED -DABORTS, exclusion .. holds
     BLIND -DNO_GUARD .................................................. exclusion VIOLATED
       the blind apply is an apply whose read guessed "free": the guard is what makes it safe.
     ONE_CLOCK -DBLIND -DONE_SNAPSHOT -DRECHECK_COUNT (also -DRENEW_COMMIT_DELAYED -DABORTS, also
       -DRENEW_EARLY_CLOCK) ............................................. holds / holds          30 s
     ONE_CLOCK -DBLIND -DONE_SNAPSHOT -DRENEW_COMMIT_DELAYED ........... exclusion VIOLATED
       two statements (the lock; the DELETE and the guard in one snapshot) are enough when the guard also
       counts what the DELETE removed: the PostgreSQL release that hands the name over
       (AutocommitOps.release; its promotion is the guarded INSERT here).
   So each of the three is needed: the advisory lock (its own statement, first), the stale-row DELETE (it
   is the wait for an in-flight renewal) and the guard (in a statement after the DELETE, or counting what
   the DELETE removed); and the apply must compare with ONE clock reading (now()), or the table's exclusion
   depends on the holders' clocks, which today's protocol does not.
   Postgres facts the model relies on: READ COMMITTED takes a snapshot per statement, also inside one
   multi-statement Query; UPDATE/DELETE wait for a row lock and re-evaluate their WHERE on the committed row
   (EvalPlanQual); a transaction's xact advisory locks are released after its commit is visible.
   Table (check.sh runs each line):
     (today)
     -DRENEW_COMMIT_DELAYED
     -DABORTS
     -DRENEW_COMMIT_DELAYED -DABORTS
     -DNOMARGIN -DRENEW_COMMIT_DELAYED -DONLY_TOLD
     -DNOMARGIN -DRENEW_COMMIT_DELAYED -DONLY_EXCLUSION
     -DNOMARGIN -DRENEW_COMMIT_DELAYED -DONLY_EXCLUSION -DONE_ACQUIRER
     -DONE_CLOCK
     -DONE_CLOCK -DRENEW_COMMIT_DELAYED -DABORTS
     -DONE_CLOCK -DNOMARGIN -DRENEW_COMMIT_DELAYED -DABORTS -DONLY_EXCLUSION
     -DLOCKING_READ -DRENEW_COMMIT_DELAYED -DABORTS
     -DLOCKING_READ -DNOMARGIN -DRENEW_COMMIT_DELAYED -DONLY_EXCLUSION
     -DNO_GUARD
     -DNO_GUARD -DONE_ACQUIRER
     -DNO_GUARD -DONE_ACQUIRER -DRENEW_COMMIT_DELAYED
     -DNO_ADVISORY
     -DNO_ADVISORY -DONE_ACQUIRER -DRENEW_COMMIT_DELAYED -DABORTS
     -DNO_DELETE
     -DNO_DELETE -DRENEW_COMMIT_DELAYED
     -DNO_DELETE -DRENEW_COMMIT_DELAYED -DONE_CLOCK
     -DONE_SNAPSHOT
     -DONE_SNAPSHOT -DRENEW_COMMIT_DELAYED
     -DONE_SNAPSHOT -DRECHECK_COUNT -DRENEW_COMMIT_DELAYED -DABORTS
     -DONE_STATEMENT -DRECHECK_COUNT
     -DONE_CLOCK -DBLIND
     -DONE_CLOCK -DBLIND -DRENEW_COMMIT_DELAYED -DABORTS
     -DONE_CLOCK -DBLIND -DRENEW_EARLY_CLOCK -DRENEW_COMMIT_DELAYED -DABORTS
     -DONE_CLOCK -DBLIND -DRENEW_EARLY_CLOCK -DNOMARGIN -DRENEW_COMMIT_DELAYED -DABORTS -DONLY_EXCLUSION
     -DBLIND -DNO_GUARD
     -DONE_CLOCK -DBLIND -DONE_SNAPSHOT -DRECHECK_COUNT -DRENEW_COMMIT_DELAYED -DABORTS
     -DONE_CLOCK -DBLIND -DONE_SNAPSHOT -DRENEW_COMMIT_DELAYED
*/
#define TTL 3
#ifdef NOMARGIN
#define MARGIN 0
#else
#define MARGIN 1
#endif
#define MAXT 9
#ifdef ONE_STATEMENT
#define ONE_SNAPSHOT
#endif

byte now = 0;
byte exp[3];           /* committed holder rows: lease end, 0 = no row. Row 0: H1; 1, 2: the acquirers */
bool holds[3];         /* each process's belief */
byte dl[3];            /* each holder's local deadline: sent + TTL - MARGIN */
byte pend0 = 0;        /* H1's renewal: the uncommitted new lease end (RENEW_COMMIT_DELAYED) */
byte rowlock0 = 0;     /* H1's row lock: 0 free, 1 its renewal (RENEW_COMMIT_DELAYED), i+1 acquirer i's
                          locking read (LOCKING_READ) */
byte namelock = 0;     /* pg_advisory_xact_lock of the name: 0 free, else the acquirer's id */
bool dropped = 0;      /* ABORTS: the one call the server dropped */

/* ABORTS: instead of its next step, an in-flight call may be dropped by the server (once in a run): what
   the server does to it is "undo"; its client never hears back and stays blocked (its lease clock fires).
   A step may come at any time, so this is a drop at any moment. */
#ifdef ABORTS
#define DROP(undo) :: atomic { !dropped -> dropped = 1; undo }; goto stuck
#else
#define DROP(undo)
#endif

#define LIVE_AT(t) ((exp[0] > t -> 1 : 0) | (exp[1] > t -> 2 : 0) | (exp[2] > t -> 4 : 0))
#define LIVE LIVE_AT(now)
/* the clock the apply's statements compare with: each statement's own (clock_timestamp(), as the dialect's
   now today), or with ONE_CLOCK one reading for the whole apply, taken when it starts (now()) */
#ifdef ONE_CLOCK
#define T t0
#else
#define T now
#endif
#define STALE ((exp[0] != 0 && exp[0] <= T -> 1 : 0) + (exp[1] != 0 && exp[1] <= T -> 1 : 0) + \
               (exp[2] != 0 && exp[2] <= T -> 1 : 0))
#define DUE(i) (holds[i] && now >= dl[i])
/* a holder's lease clock is prompt: time does not pass a due deadline before it fires */
proctype clock() { do :: now < MAXT && !DUE(0) && !DUE(1) && !DUE(2) -> now++ :: now == MAXT -> break od }
proctype timers() {
end: do
  :: atomic { DUE(0) -> holds[0] = 0 }
  :: atomic { DUE(1) -> holds[1] = 0 }
  :: atomic { DUE(2) -> holds[2] = 0 }
  od
}

/* H1: renew (one autocommit UPDATE), or release; "sent" is taken when the UPDATE runs (a later send time
   only lengthens H1's belief: a check of told that passes with it passes for any earlier send) */
proctype h1() {
  byte sent, tr; bool updated;
end: do
  :: holds[0] && now < dl[0] ->
#ifdef RENEW_EARLY_CLOCK
       atomic { sent = now; tr = now };              /* the renewal's clock is read before its UPDATE runs */
#endif
       if
       :: atomic { rowlock0 == 0 ->
#ifndef RENEW_EARLY_CLOCK
                   sent = now; tr = now;
#endif
                   if
                   :: exp[0] > tr ->
#ifdef RENEW_COMMIT_DELAYED
                        pend0 = tr + TTL; rowlock0 = 1;
#else
                        exp[0] = tr + TTL;           /* UPDATE and COMMIT in one step */
#endif
                        updated = 1
                   :: else -> updated = 0
                   fi }
       DROP(skip)                                    /* never ran */
       fi;
#ifdef RENEW_COMMIT_DELAYED
       if
       :: atomic { if :: rowlock0 == 1 -> exp[0] = pend0; pend0 = 0; rowlock0 = 0 :: else fi }   /* COMMIT */
       DROP(pend0 = 0; rowlock0 = 0)                 /* rolled back */
       fi;
#endif
       if
       :: atomic { if :: updated && holds[0] -> dl[0] = sent + TTL - MARGIN :: else -> holds[0] = 0 fi;
                   sent = 0; tr = 0; updated = 0 }   /* the reply */
       DROP(skip)                                    /* committed, the reply is lost */
       fi
  :: holds[0] ->                                     /* release: stop renewing, then DELETE WHERE token = me */
       holds[0] = 0;
       atomic { rowlock0 == 0 -> exp[0] = 0 };
       break
  :: !holds[0] -> break
  od;
  goto done;
stuck:
end_stuck: false;
done: skip
}

/* An acquirer. A read that finds the name taken changes nothing, so the model waits until a read finds it
   free (the rule grants an exclusive claim iff no live holder). "sent" is taken when the apply starts to
   run (later than its real send: the stronger check of told, as for H1). A stale row that an apply deleted
   and then rolled back (ABORTS) is left deleted: an expired row is no holding either way, and a renewal
   never revives one. */
proctype acq(byte i) {
  byte sent, snap, stale, deleted, t0; bool ok;
#ifdef BLIND
  bool blind = 1;
#endif
  do
#ifdef BLIND
  :: atomic { now < MAXT && (LIVE == 0 || blind) -> blind = 0 };   /* the first apply is sent unread */
#else
  :: atomic { now < MAXT && LIVE == 0 -> skip };    /* 1. read; 2. decide: granted */
#endif
#if defined(ONE_STATEMENT) || defined(ONE_CLOCK)
       atomic { sent = now; t0 = now;                 /* the apply starts */
#ifdef ONE_STATEMENT
                snap = LIVE_AT(T); stale = STALE;     /* the statement's snapshot, before the lock */
#endif
                skip };
#endif
       if
#ifndef NO_ADVISORY
       :: atomic { namelock == 0 -> namelock = i;   /* SELECT pg_advisory_xact_lock(a, b) */
#else
       :: atomic { skip;
#endif
#if !defined(ONE_STATEMENT) && !defined(ONE_CLOCK)
                   sent = now;
#endif
#if defined(ONE_SNAPSHOT) && !defined(ONE_STATEMENT)
                   snap = LIVE_AT(T); stale = STALE;   /* the DELETE+INSERT statement's snapshot */
#endif
                   skip }
       DROP(skip)
       fi;
#ifdef LOCKING_READ
       /* SELECT 1 FROM holders WHERE name_key = k FOR UPDATE: waits for a renewal's COMMIT, then holds the
          row locks (a renewal waits for our COMMIT and re-evaluates expires_at > its clock) */
       if
       :: atomic { rowlock0 == 0 -> rowlock0 = i + 1 }
       DROP(if :: namelock == i -> namelock = 0 :: else fi)
       fi;
#endif
#ifndef NO_DELETE
       /* DELETE ... WHERE name_key = k AND expires_at <= clock. Only H1's row is ever updated: if its last
          committed version looks expired and a renewal holds its row lock, wait for that COMMIT, then
          re-evaluate on the committed row */
       if
       :: atomic { (exp[0] == 0 || exp[0] > T || rowlock0 != 1) ->
                   if :: exp[0] != 0 && exp[0] <= T -> exp[0] = 0; deleted++ :: else fi;
                   if :: exp[1] != 0 && exp[1] <= T -> exp[1] = 0; deleted++ :: else fi;
                   if :: exp[2] != 0 && exp[2] <= T -> exp[2] = 0; deleted++ :: else fi }
       DROP(if :: namelock == i -> namelock = 0 :: else fi; if :: rowlock0 == i + 1 -> rowlock0 = 0 :: else fi)
       fi;
#endif
       /* INSERT ... SELECT ... WHERE <guard> RETURNING fence, and COMMIT (also after a 0-row INSERT) */
       if
       :: atomic {
#if defined(NO_GUARD)
                   ok = 1;
#elif defined(ONE_SNAPSHOT)
                   ok = (snap == 0);
#ifdef RECHECK_COUNT
                   ok = ok && (deleted == stale);
#endif
#else
                   ok = (LIVE_AT(T) == 0);          /* the live holders are still what 1 read */
#endif
#ifdef NO_ADVISORY
                   if :: ok -> snap = T + TTL :: else fi     /* the INSERT; its COMMIT below */
         }
       DROP(if :: rowlock0 == i + 1 -> rowlock0 = 0 :: else fi)
       fi;
       if
       :: atomic { if :: ok -> exp[i] = snap :: else fi;
#else
                   if :: ok -> exp[i] = T + TTL :: else fi;     /* under the name's lock: INSERT, COMMIT */
                   namelock = 0;
#endif
                   if :: rowlock0 == i + 1 -> rowlock0 = 0 :: else fi;
                   snap = 0; stale = 0; deleted = 0; t0 = 0 }
       DROP(if :: namelock == i -> namelock = 0 :: else fi; if :: rowlock0 == i + 1 -> rowlock0 = 0 :: else fi)
       fi;
       if
       :: ok ->                                       /* the reply; after the local lease end: no grant */
            if
            :: atomic { if :: now < sent + TTL - MARGIN -> holds[i] = 1; dl[i] = sent + TTL - MARGIN :: else fi }
            DROP(skip)                                /* committed, the reply is lost */
            fi;
            break
       :: else -> sent = 0                            /* 0 rows: read again */
       fi
  :: now == MAXT -> break
  od;
  goto done;
stuck:
end_stuck: false;
done: skip
}

init {
  atomic {
    exp[0] = TTL; holds[0] = 1; dl[0] = TTL - MARGIN;
    run clock(); run timers(); run h1();
    run acq(1);
#ifndef ONE_ACQUIRER
    run acq(2);
#endif
  }
}

active proctype monitor() {   /* -DONLY_TOLD / -DONLY_EXCLUSION check one property alone */
#ifndef ONLY_EXCLUSION
  assert(!(holds[0] && holds[1]) && !(holds[0] && holds[2]) && !(holds[1] && holds[2]));   /* told */
#endif
#ifndef ONLY_TOLD
  assert(!(exp[0] > now && exp[1] > now) && !(exp[0] > now && exp[2] > now) &&
         !(exp[1] > now && exp[2] > now))                                                 /* exclusion */
#endif
}
