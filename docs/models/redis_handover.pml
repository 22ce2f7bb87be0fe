/* Redis direct hand-over (src/distlock/_backends/redis/lua/locks.py RELEASE/ACQUIRE, _backends/redis/_async/attempt.py):
   one exclusive name. H holds it and releases once; W is queued (its queue deadline qd = the server's time
   when it last ran W's try + QTTL, refreshed by each of W's failed tries); C is any other client, which takes
   the name whenever the server sees it free. Time is one shared tick counter (the server's expiry and the
   clients' timers run at the same rate: the clock-rate part of the drift margin is not modelled, MARGIN is).

   The protocol: H's release, in one atomic step, deletes H's key and, when W's entry is live, sets the key to
   W's token with PX = min(TTL, qd - now) (the grant deadline), bumps the fence and pushes "W granted, fence f".
   W, on that push, holds at once (no round trip) with the local lease end start + min(TTL, QTTL) - MARGIN,
   start = the send stamp the push carries: each of W's tries writes its own send time into its queue entry
   together with qd, and the release echoes the stamp of the entry it granted (that try ran before the grant
   and set qd, so the server's lease, min(grant + TTL, qd), ends no earlier). A try of W that finds itself already holding (the
   push was lost or is late) confirms: it sets PX = TTL, so its reply's lease counts from its own send.
   W renews (PX = TTL if still the holder) before its local lease end; W may die at any moment.
   Checked in every reachable state:
     told:      never C holding while W still believes it holds (W's lost fires before anyone else holds)
     deadline:  a dead W holds the name no longer than its last queue deadline (F12: as short as a dead
                waiter's queue entry lasts today)
     fence:     fences strictly increase over grants
   Variants (-D):
     NO_GRANT_DEADLINE  the release grants with PX = TTL (not capped at the queue deadline)
     LATE_START         W counts its lease from when it takes the push (after the grant), not from the stamp
     LAST_FAIL          W counts from the send of its own last failed try instead of the echoed stamp (a push
                        delayed past the grant's end meets a later failed try: its stamp is after the grant)
     NO_CONFIRM_EXTEND  a try that finds W already holding only says so (no PX = TTL): W counts from its send
     LOSSY              a push may be lost (W finds the grant by its next try)
   Results: the unflagged model and LOSSY hold; NO_GRANT_DEADLINE violates deadline (a dead waiter keeps the
   name for a whole TTL); LATE_START, LAST_FAIL and NO_CONFIRM_EXTEND violate told (W believes past the
   server's lease end, so C can hold while W still writes).
   Table (check.sh runs each line):
     (today)
     -DLOSSY
     -DNO_GRANT_DEADLINE
     -DLATE_START
     -DLAST_FAIL
     -DNO_CONFIRM_EXTEND -DLOSSY
*/
#define TTL 6
#define QTTL 3
#define MARGIN 1
#define TMAX 14
#define L_W (QTTL < TTL -> QTTL : TTL)

#define FREE 0
#define HH 1
#define WW 2
#define CC 3

byte now = 0;
byte key = HH;           /* the server's key: who holds */
byte exp = TTL;          /* its PX end */
bool queued = 0;         /* W's queue entry */
byte qd = 0;             /* its deadline */
byte fence = 1;          /* the counter (H got 1) */
byte last = 1;           /* the largest fence handed out */
byte qs = 0;             /* the send stamp W's try wrote into its entry with qd */
bool pushed = 0;         /* a hand-over push on its way to W */
byte pstart = 0;         /* ... carrying the entry's send stamp */
byte wend = 0;           /* W's local lease end (0: W does not believe it holds) */
byte gqd = 0;            /* ghost: the queue deadline W's last failed try set (0 once W held since) */
bool wdead = 0;
byte deadqd = 0;         /* W's queue deadline when it died while waiting (0: it died holding, or lives) */
bool cheld = 0;

#define live(k) (key == k && exp > now)
#define isfree (key == FREE || exp <= now)
#define wbelieves (wend > now)

inline grant(k, e) {
  key = k; exp = e; fence++;
  assert(fence > last); last = fence
}

active proctype clock() {
  do
  :: now < TMAX -> now++
  :: now >= TMAX -> break
  od
}

active proctype holder() {
  /* H releases at some moment while it holds */
  atomic {
    live(HH) ->
    key = FREE;
    if
    :: queued && qd > now ->
#ifdef NO_GRANT_DEADLINE
       grant(WW, now + TTL);
#else
       if
       :: now + TTL < qd -> grant(WW, now + TTL)
       :: else -> grant(WW, qd)
       fi;
#endif
       queued = 0;
       pstart = qs;
       if
       :: pushed = 1
#ifdef LOSSY
       :: skip
#endif
       fi
    :: else -> skip
    fi
  }
}

active proctype waiter() {
  byte s, lastfail = 0;
  bool held;
  do
  :: wend == 0 && !wdead && now < TMAX - 1 ->      /* a try: sent now, run by the server later */
     s = now;
     atomic {
       if
       :: live(WW) ->
#ifndef NO_CONFIRM_EXTEND
          exp = now + TTL;
#endif
          held = 1
       :: isfree && !(queued && qd > now) -> grant(WW, now + TTL); queued = 0; held = 1
       :: else -> queued = 1; qd = now + QTTL; qs = s; gqd = qd; held = 0
       fi
     }
     atomic {                                         /* the reply arrives */
       if
       :: held -> pushed = 0; gqd = 0; wend = s + TTL - MARGIN
       :: else -> lastfail = s
       fi
     }
  :: atomic { pushed && wend == 0 && !wdead ->         /* the push: held at once, no round trip */
     pushed = 0; gqd = 0;
#if defined(LATE_START)
     wend = now + L_W - MARGIN
#elif defined(LAST_FAIL)
     wend = lastfail + L_W - MARGIN
#else
     wend = pstart + L_W - MARGIN
#endif
     }
  :: wbelieves && !wdead ->                           /* a renewal, sent now, run later */
     s = now;
     atomic { held = live(WW); if :: held -> exp = now + TTL :: else -> skip fi }
     atomic { if :: held && wend > 0 -> wend = s + TTL - MARGIN :: else -> wend = 0 fi }
  :: wend > 0 && !wbelieves -> wend = 0                /* lost (the local lease clock) */
  :: atomic { !wdead ->                                /* dies (its entry and any grant stay) */
     wdead = 1; deadqd = gqd; wend = 0 }
  :: wdead -> break
  od
}

active proctype other() {
  /* C takes the name whenever the server sees it free and W's entry is not ahead of it (fair queue) or
     simply free (an unfair lock: C barges in) */
  atomic { isfree -> grant(CC, now + TTL); cheld = 1 }
}

active proctype told() {
  /* C holds (granted, its lease live) while W still believes it holds */
  assert(!(live(CC) && wbelieves))
}

active proctype deadline() {
  /* a W that died while queued holds the name (a grant it never took) past its last queue deadline */
  assert(!(deadqd > 0 && live(WW) && now >= deadqd))
}
