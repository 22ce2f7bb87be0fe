/* A read-write lock downgrade on the queue backends: ZooKeeper (children ordered by sequence number;
   src/distlock/_backends/zookeeper/_async/recipe.py, holdings.py) and etcd (keys ordered by create revision;
   src/distlock/_backends/etcd/_async/mutex.py, _release_under in __init__.py).

   O holds the write lock: its write node W is first in the queue. It takes the read lock (its read node R goes
   at the back of the queue), then releases the write lock, then the read lock. Meanwhile a foreign writer X and
   a foreign reader Y each put their node in the queue at any moment (ahead of R or behind it), wait, hold,
   release. Grant rules, as the recipes read a snapshot of the queue: a write holds when no node is ahead of
   its own; a read when no write node is ahead of its own, or (a downgrade) its owner's own write node is in the
   queue. A holder believes it holds from its grant until it releases or is told the holding is lost.

   The write's release under the read: ZooKeeper keeps W where it is (holdings.py, keeps) and deletes it with
   R; etcd moves W onto the read's lease with a put conditioned on W's create revision (a put keeps the create
   revision, so W keeps its place) and revokes that lease after deleting R.

   Checked in every reachable state:
     excl       a writer never holds together with any other owner's holding (so no reader is admitted
                while a foreign writer holds, and no writer while O holds either mode)
     no_block   O's read is granted at its first look while O still holds the write (no waiter delays it)
   Variants (-D):
     NO_KEEP       W is deleted at the write's release (Curator's own downgrade)
     NO_COMPANION  O's read follows the plain read rule
     LAPSE         etcd: W's lease (its own until the move) may run out while O holds the write; O is told the
                   write is lost first (the lease clock), then W goes. ZooKeeper has no such fault: W and R
                   are ephemerals of one session and go together.
     TIED          etcd: until the move, the read's local lease end is the earlier of its own and W's lease's,
                   so a lapse of W's lease tells the read lost too (what distlock runs)
   Results (spin 6.5.2, a second each): the unflagged model holds. NO_KEEP violates excl (X, queued between W
   and R, is first once W goes while O still reads). NO_COMPANION violates no_block (X queued between W and R:
   R waits for X, which waits for O). LAPSE alone violates excl (W's lease runs out after R's grant and before
   the move: X holds while O still reads); LAPSE with TIED holds.
   Table (check.sh runs each line):
     (today)
     -DNO_KEEP
     -DNO_COMPANION
     -DLAPSE
     -DLAPSE -DTIED
*/

bool w = 1, r = 0, x = 0, y = 0;    /* the server: the nodes in the queue */
byte sw = 1, sr, sx, sy;            /* their sequence numbers (creation order) */
byte seq = 2;
bool moved = 0;                     /* etcd: W is on the read's lease */
bool oW = 1, oR = 0, xW = 0, yR = 0;  /* beliefs: holds */
bool lostW = 0;                     /* ghost: O was told its write is lost */

#define ahead(s, t, n) (n && s < t)
#define writeAhead(t) (ahead(sw, t, w) || ahead(sx, t, x))
#define xFirst (!ahead(sw, sx, w) && !ahead(sr, sx, r) && !ahead(sy, sx, y))
#define excl !(xW && (oW || oR || yR))
#define no_block (granted || lostW)

active proctype O() {
  bool granted;
  atomic { r = 1; sr = seq; seq++ }
  atomic {
#ifdef NO_COMPANION
    granted = !writeAhead(sr);
#else
    granted = w && oW || !writeAhead(sr);
#endif
    assert(no_block);
    if :: granted -> oR = 1 :: else -> skip fi
  }
  if
  :: granted -> skip
  :: else -> atomic { !writeAhead(sr) -> oR = 1 }   /* the write was lost: an ordinary reader */
  fi;
  /* release the write */
  atomic {
    oW = 0;
#ifdef NO_KEEP
    w = 0
#else
    if :: w -> moved = 1 :: else -> skip fi
#endif
  }
  /* release the read: R, then W with it (ZooKeeper: delete; etcd: revoke the read's lease) */
  atomic { oR = 0; r = 0 }
  w = 0
}

active proctype X() {
  atomic { x = 1; sx = seq; seq++ }
  atomic { xFirst -> xW = 1 }
  atomic { xW = 0; x = 0 }
}

active proctype Y() {
  atomic { y = 1; sy = seq; seq++ }
  atomic { !writeAhead(sy) -> yR = 1 }
  atomic { yR = 0; y = 0 }
}

#ifdef LAPSE
active proctype Lapse() {
  atomic { w && !moved && oW ->
    oW = 0; lostW = 1;
#ifdef TIED
    oR = 0;
#endif
    w = 0 }
}
#endif

active proctype monitor() {
  assert(excl)
}
