/* Redlock fences as distlock implements them (src/distlock/_backends/redis/_async/fences.py, plan),
   over N = 3 masters, acquisitions one after another. Checked on every grant: fences strictly increase.

   Each master keeps one fence counter (not one per name) and a marker: the server run id the counter was
   seeded under. A master is "seeded" when its marker holds its current run id. Per round:
     1. every master that answers runs the acquire script; it may grant the lock or not (another holder);
        a seeded master that grants increments its counter, an unseeded one does not;
     2. if a majority of all masters answered seeded: floor = the largest counter among them;
        fence = the largest counter among the seeded masters that granted, if a majority granted AND a
        majority of seeded masters granted;
        else if all masters answered and none is seeded (a new fleet, or all restarted): floor = the largest
        counter + 1, and fence = floor if a majority granted;
        else: refused (nothing handed out);
     3. no fence: the unseeded masters that answered are re-seeded with floor (each write may be lost);
        a fence: it is written back, before the grant, to the granting masters that are behind and to
        every unseeded master that answered (counter = max(counter, floor, fence), marker = run id); each
        write may be lost; granted only if a majority of granting masters hold the fence afterwards.
   Faults: any master may miss any step; WIPES: one master loses its data once (counter 0, marker gone);
   ROLLBACK: one master restarts from older data once (counter goes back; a restart changes the run id,
   so its marker no longer matches: unseeded).
   Variants (-D):
     WIPES, ROLLBACK   the faults above
     FRESH             the masters start unseeded with counter 0 (a new fleet: the bootstrap path)
     RESEED_ANY        (a wrong rule, to see it fail) re-seed and count fences with a single seeded answer
     HANDOVER          a round may be a direct hand-over instead (a release granted the waiter on each master
                       where it was the head of the queue and the master is seeded under the run id both the
                       waiter's try and the release were sent under; each such master increments its counter
                       and pushes the fence): the waiter counts only the pushes it has received (a master may
                       grant and its push be late or lost), writes nothing back, and holds if a majority of
                       pushes came and a majority of them carry the largest fence among them; else the round
                       hands out nothing (the waiter's next try is an ordinary round)
     HANDOVER_ANY      (a wrong rule, to see it fail) a hand-over holds with a majority of pushes, whatever
                       fences they carry
     WIPE_MAJ          two wipes instead of one (a majority of the masters may lose their counters)
     LIVE              also check that locking never stops for good: a round in which every master answers
                       and grants hands out a fence
     CLOCK             the masters' clock (one tick = a microsecond, a round takes at least one, an outage
                       OUTAGE): an unseeded master reports max(counter, clock) as its counter, and a round in
                       which a majority answers but fewer than a majority of them are seeded seeds them with
                       the largest report plus one (and hands that out if a majority granted). The
                       assumption: the masters' clocks agree to within an outage. ACQS=3 keeps the state
                       space in memory (about 3 GB, 1-2 minutes each)
   Results: holds in every line but two. "-DWIPES -DRESEED_ANY" is the wrong rule. "-DFRESH -DWIPES
   -DROLLBACK" is the tolerance limit: on a new fleet, a master that has not been seeded yet (its bootstrap
   write was lost) is one without state; a wipe and a rollback of the two others leave no master that knows
   the last fence, all three look new, and the bootstrap starts below it. Fences survive as long as fewer
   than a majority of masters are without their state at once.
   Without CLOCK, a majority of wiped masters stops locking for good ("-DLIVE -DWIPES -DWIPE_MAJ": a round in
   which all answer and grant hands out nothing, since too few are seeded to re-seed the others). With CLOCK,
   both the tolerance limit and the stop are gone: "-DLIVE -DCLOCK -DFRESH -DWIPES -DWIPE_MAJ -DROLLBACK" holds.
   A direct hand-over (HANDOVER) keeps the rule with no write-back as long as the waiter holds only when a
   majority of the pushes it received carry their largest fence (the wrong rule HANDOVER_ANY fails): any
   earlier fence was written to a majority, which shares a master with the pushes' majority.
   Table (check.sh runs each line):
     (today)
     -DWIPES
     -DROLLBACK
     -DWIPES -DROLLBACK
     -DFRESH -DWIPES
     -DFRESH -DWIPES -DROLLBACK
     -DWIPES -DRESEED_ANY
     -DHANDOVER
     -DHANDOVER -DWIPES -DROLLBACK
     -DHANDOVER -DFRESH -DWIPES
     -DHANDOVER -DHANDOVER_ANY
     -DLIVE -DACQS=3 -DWIPES -DWIPE_MAJ
     -DLIVE -DCLOCK -DACQS=3 -DFRESH -DWIPES -DWIPE_MAJ -DROLLBACK
     -DCLOCK -DHANDOVER -DACQS=3 -DFRESH -DWIPES -DWIPE_MAJ -DROLLBACK
*/
#define N 3
#define MAJ 2
#ifndef ACQS
#define ACQS 4
#endif

#ifdef RESEED_ANY
#define SEEDQ 1
#else
#define SEEDQ MAJ
#endif

byte cnt[N];
bool seeded[N];
byte last = 0;          /* the largest fence handed out so far */
byte wiped = 0;
bool rolled = 0;
#ifdef WIPE_MAJ
#define WIPEN 2
#else
#define WIPEN 1
#endif
#define OUTAGE 3
byte clk = 1;           /* CLOCK: the masters' clock (one tick = a microsecond); an outage takes OUTAGE ticks */

/* a master counts one up (a hand-over's pushes from several masters must carry the same fence, so the
   masters do not take their own clocks when they count) */
inline bump(i) {
  cnt[i]++
}

/* what master i reports as its counter: CLOCK, an unseeded master reports its clock if that is larger */
inline report(i, v) {
  v = cnt[i];
#ifdef CLOCK
  if :: !seeded[i] && clk > v -> v = clk :: else fi
#endif
}

proctype acquirer() {
  byte i, v, fence, floor, sn, an, wn, wsn, acked, done = 0;
  bool ans[N], won[N], fresh[N];
  byte w;
  bool ho = 0;          /* this round is a hand-over */
  do
  :: done < ACQS ->
#ifdef WIPES
       if :: wiped < WIPEN -> atomic { select(w : 0 .. N-1); cnt[w] = 0; seeded[w] = 0; wiped++; clk = clk + OUTAGE } :: true fi;
#endif
#ifdef ROLLBACK
       if
       :: !rolled -> atomic { select(w : 0 .. N-1); select(i : 0 .. cnt[w]); cnt[w] = i; seeded[w] = 0; rolled = 1; clk = clk + OUTAGE }
       :: true
       fi;
#endif
       /* 1. the acquire script on every master that answers (a hand-over: the pushes that arrived) */
       sn = 0; an = 0; wn = 0; wsn = 0;
#ifdef CLOCK
       clk++;   /* a round takes a tick (a microsecond) at least; more only helps */
#endif
#ifdef HANDOVER
       if :: ho = 1 :: ho = 0 fi;
#endif
       for (i : 0 .. N-1) {
         if
         :: ho && seeded[i] ->
              if
              :: ans[i] = 1; won[i] = 1            /* granted, and its push arrived */
              :: ans[i] = 0; won[i] = 0; bump(i)    /* granted, its push late or lost: uncounted */
              :: ans[i] = 0; won[i] = 0             /* not the head of its queue there: no grant */
              fi
         :: ho && !seeded[i] -> ans[i] = 0; won[i] = 0   /* no hand-over on a master not seeded under that run */
         :: !ho ->
              if :: ans[i] = 1 :: ans[i] = 0 fi;
              if :: ans[i] -> if :: won[i] = 1 :: won[i] = 0 fi :: else -> won[i] = 0 fi
         fi;
         fresh[i] = 0;
         if
         :: ans[i] ->
              an++;
              if :: seeded[i] -> sn++ :: else fi;
              if :: won[i] -> wn++; if :: seeded[i] -> bump(i); wsn++ :: else fi :: else fi
         :: else
         fi
       }
       /* 2. the fence, the floor and the masters to re-seed */
       fence = 0; floor = 0;
       if
       :: sn >= SEEDQ ->
            for (i : 0 .. N-1) {
              if :: ans[i] && seeded[i] && cnt[i] > floor -> floor = cnt[i] :: else fi;
              fresh[i] = ans[i] && !seeded[i]
            }
            if
            :: wn >= MAJ && wsn >= SEEDQ ->
                 for (i : 0 .. N-1) { if :: won[i] && seeded[i] && cnt[i] > fence -> fence = cnt[i] :: else fi }
            :: else
            fi
#ifdef CLOCK
       :: sn < SEEDQ && an >= MAJ ->   /* a majority answered, too few of them seeded: seed from the clock */
            for (i : 0 .. N-1) {
              if :: ans[i] -> report(i, v); if :: v > floor -> floor = v :: else fi; fresh[i] = !seeded[i] :: else fi
            }
            floor++;
            if :: wn >= MAJ -> fence = floor :: else fi
#else
       :: sn == 0 && an == N ->
            for (i : 0 .. N-1) { if :: cnt[i] > floor -> floor = cnt[i] :: else fi; fresh[i] = 1 }
            floor++;
            if :: wn >= MAJ -> fence = floor :: else fi
#endif
       :: else       /* refused */
       fi;
#ifdef LIVE
       /* every master answered and granted: a fence is handed out (locking never stops for good) */
       assert(!(an == N && wn == N) || fence > 0);
#endif
       /* 3. re-seed, or write back and grant */
       if
       :: fence == 0 ->
            for (i : 0 .. N-1) {
              if
              :: fresh[i] -> if :: cnt[i] < floor -> cnt[i] = floor :: else fi; seeded[i] = 1
              :: fresh[i] -> skip            /* the write is lost */
              :: else
              fi
            }
       :: else ->
            if :: floor < fence -> floor = fence :: else fi;
            acked = 0;
            for (i : 0 .. N-1) {
              if
              :: won[i] && seeded[i] && !fresh[i] && cnt[i] == fence -> acked++
#ifdef HANDOVER_ANY
              :: won[i] && ho && cnt[i] != fence -> acked++
#endif
              :: ((won[i] && !fresh[i] && cnt[i] != fence) || fresh[i]) && ho -> skip   /* a hand-over writes nothing */
              :: ((won[i] && !fresh[i] && cnt[i] != fence) || fresh[i]) && !ho ->
                   if
                   :: if :: cnt[i] < floor -> cnt[i] = floor :: else fi; seeded[i] = 1;
                      if :: won[i] -> acked++ :: else fi
                   :: skip                   /* the write-back is lost */
                   fi
              :: else
              fi
            }
            if
            :: acked >= MAJ -> assert(fence > last); last = fence
            :: else         /* refused: nothing handed out */
            fi
       fi;
       done++
  :: done == ACQS -> break
  od
}

init {
  byte i;
  for (i : 0 .. N-1) {
    cnt[i] = 0;
#ifdef FRESH
    seeded[i] = 0
#else
    seeded[i] = 1
#endif
  }
  run acquirer()
}
