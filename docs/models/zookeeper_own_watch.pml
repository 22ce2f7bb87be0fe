/* ZooKeeper: the waiter next in line holds on its turn with no request
   (src/distlock/_backends/zookeeper/_async/recipe.py, _step_locked; nodes.py, recheck).

   W waits, next in line: its own child O and the one child ahead of it, A (the holder's). When W started to
   wait it set, in one round trip on its connection, a watch on O and then one on A, and recorded the
   client's connection epoch (state changes seen) at that moment. The server tells a watch's event on the
   connection that set it, in the order it applied the changes, and clears the watch; kazoo's one connection
   thread reads the events in that order and W's callbacks record them where they are read. A connection
   drop loses the events not read yet and every watch of that connection (kazoo sets none again on the next
   one); the client sees the state change (epoch + 1) before anything that comes on a new connection, and
   wakes W, which re-checks: it reads the epoch, then sends get(O) and get(A), each with a watch, on whatever
   connection is up by then, and records that epoch as the one of its watches (a drop in between leaves it
   older than the client's: the rule then asks). Before the re-arm, the re-check watched A only.

   The rule: on A's deletion event, W holds with no request if the epoch is the one of its watches and no
   deletion of O was told; otherwise it asks exists(O) and holds if O is there. Anyone (an admin,
   break_lock, a session end) may delete O at any moment; the holder deletes A at any moment.
   Checked in every reachable state:
     first:  W holds only if O existed when A was deleted (it was first in line then; a deletion of O after
             that is a holder's loss, which its holding's own watch reports)
   Variants (-D):
     NO_OWN_GONE   the rule ignores a told deletion of O
     NO_EPOCH      the rule ignores connection changes since the watches were set
     NO_REARM      the re-check watches A only (O's watch stays lost: the code before the re-arm)
   Results: the unflagged model holds. NO_OWN_GONE violates first (O's deletion and A's come back to back).
   NO_REARM holds (after a drop the rule asks instead, until the next listing). NO_REARM with NO_EPOCH violates
   first (a drop loses O's watch, the re-check re-arms A's only, O is deleted silently): the epoch is what
   keeps a waiter whose O watch is lost from trusting it. With the re-arm, every watch on A of a waiter next in
   line is set together with one on O, so NO_EPOCH alone holds too: the code keeps the epoch check as a
   second guard (a watch on O that a connection took with it is never trusted, however it was lost).
   Table (check.sh runs each line):
     (today)
     -DNO_OWN_GONE
     -DNO_EPOCH
     -DNO_REARM
     -DNO_REARM -DNO_EPOCH
*/
mtype = { DEL_O, DEL_A };
chan ev = [2] of { mtype };     /* events on the current connection, in the server's order, not read yet */

bool o = 1, a = 1;              /* the server: O and A exist */
bool wo = 1, wa = 1;            /* the server: the watches of W's connection on O and on A */
bool conn = 1;
byte epoch = 0;                 /* the client: connection changes seen */
byte armed = 0;                 /* the epoch when W's watches were set */
byte seen = 0;                  /* the last epoch W re-checked after */
byte drops = 0;
byte e = 0;                     /* the epoch W read for the re-check in progress */
byte step = 0;                  /* W's re-check: 0 none, 1 epoch read, requests not sent yet */
bool o_gone = 0, a_gone = 0;    /* what W's callbacks recorded */
bool o_at_a = 0;                /* ghost: O existed when A was deleted */
bool held = 0;

inline hold() {
  assert(o_at_a);               /* first */
  held = 1
}

active proctype World() {
  do
  :: atomic { o -> o = 0; if :: conn && wo -> ev!DEL_O; wo = 0 :: else -> skip fi }
  :: atomic { a -> o_at_a = o; a = 0; if :: conn && wa -> ev!DEL_A; wa = 0 :: else -> skip fi }
  :: atomic { conn && drops < 2 -> conn = 0; drops++; wo = 0; wa = 0; epoch++;
              do :: nempty(ev) -> ev?_ :: empty(ev) -> break od }
  :: atomic { !conn -> conn = 1; epoch++ }
  :: held -> break
  od
}

active proctype W() {
  do
  :: atomic { ev?DEL_O -> o_gone = 1 }
  :: atomic { ev?DEL_A -> a_gone = 1 }
  :: atomic { a_gone && !held ->
#ifdef NO_OWN_GONE
       if :: armed == epoch -> hold()
#elif defined(NO_EPOCH)
       if :: !o_gone -> hold()
#else
       if :: armed == epoch && !o_gone -> hold()
#endif
          :: else -> if :: conn && o -> hold() :: conn && !o -> break :: else -> skip fi  /* exists(O) */
       fi }
  :: atomic { step == 0 && !a_gone && !held && seen != epoch && conn ->  /* woken by the state change */
       seen = epoch; e = epoch; step = 1 }
  :: atomic { step == 1 && !held && conn ->   /* the re-check's requests, on the connection up now */
       if :: !o -> break                      /* O is gone: queue again (a new child, out of this model) */
          :: o && a ->
#ifdef NO_REARM
             wa = 1; step = 0                 /* watch A again; O's watch is not set again */
#else
             wa = 1; wo = 1; armed = e; step = 0  /* both again, under the epoch read before */
#endif
          :: o && !a -> hold()                /* A gone, O there: first */
       fi }
  :: held -> break
  od
}
