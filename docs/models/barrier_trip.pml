/* A barrier's trip and withdraw (src/distlock/_core/barrier.py, step; src/distlock/_async/barrier.py, _arrive).

   Three participants, parties = 2. The barrier is one record on the server: the open generation's arrivals
   (each a lease) and the tripped marker of each generation that reached its parties. A backend applies a step
   atomically: it reads the record, computes the step, and writes the record back in one transaction or one
   compare-and-set of the whole record. A step first drops the arrivals whose lease ran out. ARRIVE joins the
   open generation; the arrival that makes `parties` moves the open arrivals onto the generation's marker and
   opens the next generation. A waiter LOOKs again and again: its generation's marker releases it (and takes
   it off the marker), its open arrival is renewed, or, its arrival gone (its lease ran out in a stall), it
   ARRIVEs again. A wait whose deadline passes WITHDRAWs once: a member on a marker is released all the same
   (its generation tripped with it), otherwise its arrival is taken back and the wait returns False.
   The clock may end the lease of one open arrival once (a waiter stalled past its ttl).

   Checked in every reachable state (ghosts: `live` = an arrival not withdrawn and not run out; `tg` = the
   generation a trip counted the participant in):
     full        every arrival a trip counts is live (no barrier trips with fewer than `parties` live arrivals)
     by_trip     a wait returns True only if a trip counted its participant (no early release)
     not_undone  a wait returns False only if no trip counted its participant (a late withdraw undoes nothing)
   Variants (-D):
     SPLIT          the read and the write of a step are two steps (a store without a transaction or a
                    compare-and-set: another step may land between them)
     BLIND          the withdraw takes the arrival off the open generation and ignores the markers
     NO_PRUNE       a step counts arrivals whose lease ran out
     LOST_WITHDRAW  the withdraw never reaches the server (the wait raises; its arrival stays until its lease
                    runs out: where the guarantee of `full` ends, a ttl after the caller gave up)
     LINGER         a marker's `linger` passes before a member saw it (a waiter stalled that long)
   Results (spin 6.5.2, seconds each): the unflagged model holds. SPLIT violates not_undone (a withdraw
   computed before a trip writes the pre-trip record back). BLIND violates not_undone. NO_PRUNE and
   LOST_WITHDRAW violate full. LINGER violates not_undone (the member misses its trip, arrives again and
   times out): a participant must look within `linger`, which the waiter does every 0.2 s.
   Table (check.sh runs each line):
     (today)
     -DSPLIT
     -DBLIND
     -DNO_PRUNE
     -DLOST_WITHDRAW
     -DLINGER
*/
#define N 3
#define PARTIES 2
#define NONE 255
#define ARRIVE 0
#define LOOK 1
#define WITHDRAW 2
#define WAITING 0
#define TRIPPED 1
#define GONE 2
#define WITHDRAWN 3

byte gen = 0;
byte st[N];          /* 0 absent, 1 an open arrival (generation `gen`), 2 on the marker of generation mg[i] */
byte mg[N];
bool lapsed[N];      /* the clock passed the end of i's arrival lease (the next step drops it) */
byte lapses = 0;
bool live[N];        /* ghosts */
byte tg[N];
byte res[N];         /* 0 waiting, 1 returned True, 2 returned False, 3 raised */

#define full_at(k) (live[k])
#define by_trip(k) (tg[k] != NONE)
#define not_undone(k) (tg[k] == NONE)

/* one step of participant i: `op`, for generation `g`; sets `reply`, `rg` */
inline load() {
  lg = gen; k = 0;
  do :: k < N -> ls[k] = st[k]; lm[k] = mg[k]; k++ :: else -> break od
}
inline compute(op) {
  trip = 0; k = 0;
#ifndef NO_PRUNE
  do :: k < N -> if :: ls[k] == 1 && lapsed[k] -> ls[k] = 0 :: else -> skip fi; k++ :: else -> break od;
#endif
  if
  :: op == ARRIVE ->
     if
     :: ls[i] == 2 -> reply = TRIPPED; rg = lm[i]
     :: else ->
        ls[i] = 1; cnt = 0; k = 0;
        do :: k < N -> if :: ls[k] == 1 -> cnt++ :: else -> skip fi; k++ :: else -> break od;
        if
        :: cnt < PARTIES -> reply = WAITING; rg = lg
        :: else ->
           k = 0;
           do :: k < N -> if :: ls[k] == 1 -> ls[k] = 2; lm[k] = lg :: else -> skip fi; k++ :: else -> break od;
           trip = 1; reply = TRIPPED; rg = lg; lg++
        fi
     fi
  :: op == WITHDRAW ->
#ifdef BLIND
     if :: ls[i] == 1 -> ls[i] = 0 :: else -> skip fi; reply = WITHDRAWN
#else
     if
     :: ls[i] == 2 -> ls[i] = 0; reply = TRIPPED; rg = lm[i]
     :: else -> ls[i] = 0; reply = WITHDRAWN
     fi
#endif
  :: op == LOOK ->
     if
     :: ls[i] == 2 && lm[i] == g -> ls[i] = 0; reply = TRIPPED; rg = g
     :: ls[i] == 1 && lg == g -> reply = WAITING
     :: else -> reply = GONE
     fi
  fi
}
inline save(op) {
  gen = lg; k = 0;
  do :: k < N -> st[k] = ls[k]; mg[k] = lm[k]; k++ :: else -> break od;
  if :: op == ARRIVE && reply != TRIPPED || op == LOOK && reply == WAITING -> lapsed[i] = 0 :: else -> skip fi;
  if :: op == ARRIVE -> live[i] = 1 :: op == WITHDRAW -> live[i] = 0 :: else -> skip fi;
  if
  :: trip ->
     k = 0;
     do
     :: k < N -> if :: st[k] == 2 && mg[k] == rg -> assert(full_at(k)); tg[k] = rg :: else -> skip fi; k++
     :: else -> break
     od
  :: else -> skip
  fi
}
inline stepop(op) {
#ifdef SPLIT
  atomic { load() }
  atomic { compute(op); save(op) }
#else
  atomic { load(); compute(op); save(op) }
#endif
}

proctype Part(byte i) {
  byte g, reply, rg, k, cnt, lg;
  byte ls[N], lm[N];
  bool trip, timedout = 0;
arrive:
  stepop(ARRIVE);
  if :: reply == TRIPPED -> goto released :: else -> g = rg fi;
  do
  :: stepop(LOOK);
     if
     :: reply == TRIPPED -> goto released
     :: reply == GONE -> goto arrive
     :: else -> skip
     fi
  :: !timedout ->
     timedout = 1;
#ifdef LOST_WITHDRAW
     if
     :: atomic { live[i] = 0; res[i] = 3 }; goto out
     :: skip
     fi;
#endif
     stepop(WITHDRAW);
     if
     :: reply == TRIPPED -> goto released
     :: else -> atomic { assert(not_undone(i)); res[i] = 2 }; goto out
     fi
  od;
released:
  atomic { assert(by_trip(i)); res[i] = 1 };
out:
  skip
}

active proctype Clock() {
  byte k;
  do
  :: atomic { lapses < 1 -> k = 0;
       do
       :: k < N && st[k] == 1 && live[k] -> lapsed[k] = 1; live[k] = 0; lapses++; break
       :: k < N -> k++
       :: k >= N -> break
       od }
#ifdef LINGER
  :: atomic { k = 0;
       do
       :: k < N && st[k] == 2 -> st[k] = 0; break
       :: k < N -> k++
       :: k >= N -> break
       od }
#endif
  :: break
  od
}

init {
  byte k = 0;
  atomic {
    do :: k < N -> tg[k] = NONE; k++ :: else -> break od;
    run Part(0); run Part(1); run Part(2)
  }
}
