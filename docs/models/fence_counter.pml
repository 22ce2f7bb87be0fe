/* The fence counter of one Redis node (a single server, a Sentinel-managed master, or one hash slot's counter
   on Redis Cluster), and what happens to fences when the counter is lost or goes back. Checked on every grant:
   fences strictly increase (the assertion), whatever the faults below do.

   The server runs scripts one at a time. Each acquire script reads the server clock (TIME, microseconds) and
   takes the next fence; time is a tick counter `clk`, a tick = one microsecond. Every script takes at least a
   tick (a script is a few microseconds of work at the least), so two scripts of one server never read the same
   time. A replica copies the counter asynchronously: at any moment it may have any value the master had.

   Faults, each at most FAULTS times:
     WIPE      the counter is gone: flushed, evicted, or the server restarted without persistence
     FAILOVER  a replica is promoted: the counter takes the replica's copy, which may be behind (the master was
               killed right after a grant that had not reached the replica)
     ROLLBACK  the server restarts from an older snapshot (RDB/AOF): the counter goes back to an earlier value,
               and the marker beside it survives (it was in the snapshot too), so the client cannot notice
   A fault takes time: the next script runs at least OUTAGE ticks after the last one before the fault (a restart
   or a failover takes milliseconds to seconds, OUTAGE is modelled small). Under CLOCK_BACK the server that runs
   next may read a time up to SKEW ticks behind the last one read (its clock is set back, or a promoted replica's
   clock is behind the old master's by more than the outage lasted): where the guarantee ends.

   The rule (-DCLOCK, what distlock runs): fence = max(counter + 1, now): the counter never falls behind the
   server clock, so a counter lost or rolled back starts again at the current time, above every fence handed out
   before. Without it (no flag): fence = counter + 1, the counter as it was before: a fault hands out a fence again.
   SEED_ON_LOSS (a weaker rule, to see it fail): take the clock only when the counter is missing (a restart
   without persistence), count +1 otherwise: a failover to a lagging replica or a rollback repeats a fence.

   Results (spin 6.5.2, seconds each): every line without CLOCK is VIOLATED except "-DSEED_ON_LOSS -DWIPE";
   "-DCLOCK -DWIPE -DFAILOVER -DROLLBACK" holds; adding CLOCK_BACK violates it (where the guarantee ends).
   Table (one spin run per line):
     -DWIPE
     -DFAILOVER
     -DROLLBACK
     -DSEED_ON_LOSS -DWIPE
     -DSEED_ON_LOSS -DFAILOVER
     -DSEED_ON_LOSS -DROLLBACK
     -DCLOCK -DWIPE -DFAILOVER -DROLLBACK
     -DCLOCK -DWIPE -DFAILOVER -DROLLBACK -DCLOCK_BACK
*/
#define ACQS 5
#define FAULTS 2
#define OUTAGE 2
#define SKEW 3

byte clk = 1;      /* the server clock of the node that runs the next script */
byte n = 0;        /* the counter on the master (0: gone) */
byte r = 0;        /* the replica's copy of the counter */
byte last = 0;     /* the largest fence handed out so far */
byte faults = 0;
byte hi = 1;       /* the latest time any server read: a fault's outage runs from here */

inline advance() {
  /* the next script runs one or two ticks later */
  if :: clk++ :: clk = clk + 2 fi;
  if :: clk > hi -> hi = clk :: else fi
}

inline outage() {
  faults++;
  clk = hi + OUTAGE;
#ifdef CLOCK_BACK
  if :: clk = clk - SKEW :: skip fi;
#endif
}

active proctype server() {
  byte fence, old, done = 0;
  do
  :: done < ACQS ->
       /* replication: the replica may catch up with the master at any point */
       if :: r = n :: skip fi;
       if
#ifdef WIPE
       :: faults < FAULTS -> atomic { n = 0; outage() }
#endif
#ifdef FAILOVER
       :: faults < FAULTS -> atomic { n = r; outage() }
#endif
#ifdef ROLLBACK
       :: faults < FAULTS -> atomic { select(old : 0 .. n); n = old; outage() }
#endif
       :: true
       fi;
       /* one acquire script: TIME, then the next fence */
       atomic {
         advance();
#ifdef CLOCK
         if :: n + 1 > clk -> fence = n + 1 :: else -> fence = clk fi;
#elif defined(SEED_ON_LOSS)
         if :: n == 0 -> fence = clk :: else -> fence = n + 1 fi;
#else
         fence = n + 1;
#endif
         n = fence;
         assert(fence > last);
         last = fence;
         done++
       }
  :: done == ACQS -> break
  od
}
