/* ZooKeeper weighted semaphore: the acquire's multi, the last user's sweep, set_permits and Curator's
   SharedCount (src/distlock/_backends/zookeeper/semaphore.py; the recipe's _lease_step).

   The server: the capacity node C (absent, or a value and a data version), the semaphore node's data version
   V, the number of leases, and each client's internal-mutex node. A client queues on the internal mutex (its
   node; the mutex itself is one owner at a time, its order is the recipe's and not modelled), then, holding
   it, reads V, C and the leases (three reads, in that order: other clients' writes may land between them)
   and decides with the capacity it read (the first user: its own). If its leases fit, ONE multi request,
   applied atomically or not at all: C created (it read none) or C's version checked; V's version checked and
   written (the declared size); its WANT leases created. A failed multi reads again. Then it deletes its mutex
   node, holds, and releases its leases one delete at a time, or dies (its session's ephemeral nodes, leases
   and mutex node, go together; C is persistent). After a release the client sweeps: a look (leases, mutex
   nodes); if nobody is there it queues a mutex node, and if it is alone in the queue (so it holds the mutex;
   anyone later queues behind it) it reads the leases and, with none, deletes C, clears V and deletes its
   mutex node in one multi. Then the emptied nodes are deleted: the semaphore node goes when nothing is left
   under it, and whoever comes next makes it again, so V starts again from 0.
   Others: set_permits (read C, a versioned setData of C) and a Curator SharedCount.start (creates C with its
   seed when there is none, outside the mutex).
   Checked in every reachable state:
     held:    leases exist only with a capacity stored (the sweep never removes the capacity of a name in use)
     decided: a multi that creates leases decides with the capacity in force when it is applied, and its
              leases fit in it
   Variants (-D):
     NO_C_CHECK        the acquire's multi does not check C's version
     NO_V_CHECK        the acquire's multi writes V without checking its version
     SWEEP_BY_VERSION  the sweep does not queue on the mutex: it reads V, C, the leases and the mutex nodes,
                       and its multi checks V's version (the first version of the code)
   Results (spin 6.5): the unflagged model holds (6.5 million states). NO_C_CHECK violates decided (a
   set_permits between the read and the multi). NO_V_CHECK holds: with the sweep under the mutex, V's check
   is a second guard only. SWEEP_BY_VERSION violates held: two sweeps list a free name, one removes C and the
   emptied semaphore node, a newcomer makes them again and takes a lease, which brings V back to the version
   the other sweep read, and that sweep's multi removes the newcomer's capacity.
   Table (one spin run per line: spin -a [flags] zookeeper_semaphore.pml; cc -o pan pan.c; ./pan -m100000):
     (today)
     -DNO_C_CHECK
     -DNO_V_CHECK
     -DSWEEP_BY_VERSION
*/
#define N 2             /* clients */
#define DECLARED 2      /* every client's permits= */
#define SEED 3          /* Curator's SharedCount seed */
#define RESIZED 1       /* set_permits' size */
#define ROUNDS 2        /* acquires per client */

byte cval = 0;          /* C: 0 absent, else the capacity */
byte cver = 0;          /* C's data version (0 when made) */
byte vver = 0;          /* V's data version */
byte leases = 0;
bool mnode[N];          /* each client's internal-mutex node */
byte mutex = 255;       /* the client holding the internal mutex */
byte mine[N];           /* each client's leases */

active [N] proctype Client() {
  byte id = _pid;
  byte want = 1 + (_pid % 2);   /* client 0 wants 1, client 1 wants 2 */
  byte round = 0;
  byte rc, rcv, rv, rl, cap, k;
  bool sl, sk;
  byte sv, sc;
  do
  :: round < ROUNDS ->
    round++;
    mnode[id] = 1;
    atomic { mutex == 255 -> mutex = id };
read:
    rv = vver;
    atomic { rc = cval; rcv = cver };
    rl = leases;
    cap = (rc == 0 -> DECLARED : rc);
    if
    :: rl + want > cap -> goto read      /* waits for a change, the mutex kept */
    :: else -> skip
    fi;
    atomic {
      if
      :: (rc == 0 && cval == 0) || (rc != 0 && cval != 0
#ifndef NO_C_CHECK
            && cver == rcv
#endif
          ) ->
        if
#ifndef NO_V_CHECK
        :: vver != rv -> goto read
#endif
        :: else -> skip
        fi;
        if
        :: rc == 0 -> cval = DECLARED; cver = 0
        :: else -> skip
        fi;
        vver++;
        assert(cap == cval && leases + want <= cval);   /* decided */
        leases = leases + want;
        mine[id] = want
      :: else -> goto read                                   /* the multi failed: nothing applied */
      fi
    };
    mnode[id] = 0;
    mutex = 255;
    if
    :: atomic { leases = leases - mine[id]; mine[id] = 0 };  /* dies: its session's nodes go together */
       break
    :: skip
    fi;
    k = mine[id];
    do
    :: k > 0 -> atomic { leases--; mine[id]-- }; k--
    :: else -> break
    od;
    /* the sweep */
    sl = (leases > 0);
    sk = (mnode[0] || mnode[1]);
    if
    :: !sl && !sk ->
#ifdef SWEEP_BY_VERSION
      sv = vver;
      sc = cval;
      sl = (leases > 0);
      sk = (mnode[0] || mnode[1]);
      if
      :: !sl && !sk && sc != 0 ->
        atomic { if :: cval != 0 && vver == sv -> cval = 0; cver = 0; vver++ :: else -> skip fi }
      :: else -> skip
      fi;
#else
      mnode[id] = 1;
      if
      :: atomic { !mnode[1 - id] && mutex == 255 -> mutex = id };  /* alone in the queue: it holds the mutex */
        sl = (leases > 0);
        sc = cval;
        atomic {
          if
          :: !sl && sc != 0 && cval != 0 -> cval = 0; cver = 0; vver++
          :: else -> skip
          fi;
          mnode[id] = 0;
          mutex = 255
        }
      :: atomic { mnode[1 - id] -> mnode[id] = 0 }             /* someone queued: theirs */
      fi;
#endif
      /* the emptied nodes: the semaphore node goes if nothing is under it, and comes back at version 0 */
      atomic { if :: leases == 0 && !mnode[0] && !mnode[1] && cval == 0 -> vver = 0 :: else -> skip fi }
    :: else -> skip
    fi
  :: else -> break
  od
}

active proctype SetPermits() {
  byte r;
end:
  atomic { cval != 0 -> r = cver };
  atomic { if :: cval != 0 && cver == r -> cval = RESIZED; cver++ :: else -> skip fi }
}

active proctype SharedCountStart() {
end:
  atomic { cval == 0 -> cval = SEED; cver = 0 }
}

active proctype Held() {      /* runs at any point: checks held in every reachable state */
  assert(leases == 0 || cval != 0)
}
