/* MariaDB lease mode: the server's grant behind a bell wait that its client gave up on (lease_bell.server_grant,
   MyLeaseMode._end_on_server / _end_unended).
   The waiter W sent its bell wait with the grant behind it, then gave up (cancelled, its link frozen): the batch
   still runs on the server, one statement after another: the bell's GET_LOCK, the name's GET_LOCK, the
   conditional INSERT, COMMIT, the name's let-go. The holder H releases (its row, then the bell). W's client
   ends the batch's connection (KILL CONNECTION) and deletes what it may have committed by W's token under the
   name's lock (the abandon); either may not reach the server.
   KILL as MariaDB does it: it sets the connection's killed flag and returns; the batch stops at the next check
   (between statements, or in a lock wait), so a statement it had begun still runs; its connection's end rolls
   back what is not committed and lets go of its named locks. An uncontended GET_LOCK may be granted to a killed
   connection (no wait, no check). The store's KILL is conditional (TxOps.end_bell_wait: only while the
   connection runs the bell wait's statement or holds the name's bell or lock); the batch is in one of those
   states in every step modelled here before it ends, so the KILL is modelled as always applying.
   Checked in every reachable state:
     orphan:  once W's clean-up is done, W has no committed holding (none appears later either)
   Variants (-D):
     NO_RETRY   a KILL that did not reach the server is not made again (the abandon alone follows)
     NO_KILL    no KILL at all: the abandon alone, at the next answered call
   Table (check.sh runs each line):
     (today)
     -DNO_RETRY
     -DNO_KILL
*/

byte bell = 1;     /* who holds the bell: 1 H, 2 the batch, 0 nobody */
byte namelock = 0; /* the name's lock: 0 free, 2 the batch, 3 W's abandon */
bool rowh = 1;     /* H's committed holding */
bool pendw = 0;    /* the batch's uncommitted INSERT */
bool roww = 0;     /* W's committed holding (the grant) */
bool killed = 0;   /* the KILL reached the server */
bool cleaned = 0;  /* W's clean-up is done */

active proctype holder() {   /* release: the row, then the bell (TxOps.release_ringing) */
  rowh = 0;
  atomic { bell == 1 -> bell = 0 }
}

active proctype batch() {
  /* the bell's GET_LOCK: a wait the KILL interrupts */
  if
  :: atomic { bell == 0 -> bell = 2 }
  :: killed -> goto gone
  fi;
  if :: killed -> goto gone :: else fi;
  /* the name's GET_LOCK: granted even after the KILL when free; a wait the KILL interrupts */
  if
  :: atomic { namelock == 0 -> namelock = 2 }
  :: killed -> goto gone
  fi;
  if :: killed -> goto gone :: else fi;
  if :: !rowh && !roww -> pendw = 1 :: else fi;   /* INSERT ... WHERE no holder row */
  if :: killed -> goto gone :: else fi;
  atomic { roww = pendw; pendw = 0 };               /* COMMIT */
  if :: killed -> goto gone :: else fi;
  namelock = 0;                                      /* the name's lock goes, the bell stays (W's) */
gone:                                                /* the connection ends: rollback, named locks let go */
  atomic { pendw = 0; if :: namelock == 2 -> namelock = 0 :: else fi; if :: bell == 2 -> bell = 0 :: else fi }
}

inline abandon() {   /* TxOps.abandon: the name's lock, then the deletes by W's token */
  atomic { namelock == 0 -> namelock = 3 };
  roww = 0;
  namelock = 0
}

active proctype client() {
  bool ended = 0;
  /* at the give-up: KILL, then the abandon; each reaches the server, or not */
#ifndef NO_KILL
  if :: killed = 1; ended = 1 :: skip fi;
#endif
  if :: abandon() :: skip fi;
  /* the next call the server answers (MyLeaseMode._end_unended) */
#if !defined(NO_RETRY) && !defined(NO_KILL)
  if :: !ended -> killed = 1 :: else fi;
#endif
  abandon();
  cleaned = 1
}

active proctype monitor() {
  assert(!(cleaned && roww))
}
