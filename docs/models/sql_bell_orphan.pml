/* MariaDB lease mode: the server's grant behind a bell wait that its client gave up on (lease_bell.server_grant,
   MyLeaseMode._end_on_server / _kill / _end_unended).
   The waiter W sent its bell wait with the grant behind it, then gave up (cancelled, its link frozen): the batch
   still runs on the server, one statement after another: the bell's GET_LOCK, the name's GET_LOCK, the
   conditional INSERT, COMMIT, the name's let-go. It may not have begun yet when W gives up (a busy server, a
   link holding the bytes back): the server reads it later, or, once W's client closed the connection, perhaps
   never. The holder H releases (its row, then the bell). W's client closes its connection, ends the batch's
   connection from the server side (KILL CONNECTION) and deletes what it may have committed by W's token under
   the name's lock (the abandon); any of these calls may not reach the server.
   KILL as MariaDB does it: it sets the connection's killed flag and returns; the batch stops at the next check
   (between statements, or in a lock wait), so a statement it had begun still runs; its connection's end rolls
   back what is not committed and lets go of its named locks. An uncontended GET_LOCK may be granted to a killed
   connection (no wait, no check). The store's KILL is conditional (TxOps.end_bell_wait: only while the
   connection runs the bell wait's statement or holds the name's bell or lock): it applies once the batch has
   begun and until its connection is gone, and finds nothing before the batch began. The same statement answers
   whether the connection is still there: a closed connection is gone once its batch ended (or was never read).
   The store looks (and KILLs) again until it is gone, and only then abandons; when the server stops answering,
   the store does the same after its next call that the server answers. Not modelled: the clean-up's budget
   running out while the server answers and the connection is still there (a batch that reaches the server
   more than that budget after the client gave up: docs/sql.md says what it may leave).
   Checked in every reachable state:
     orphan:  once W's clean-up is done, W has no committed holding (none appears later either)
   Variants (-D):
     ONE_LOOK   one conditional KILL, then the abandon, whether the connection is gone or not (before)
     NO_RETRY   a KILL that did not reach the server is not made again (the abandon alone follows)
     NO_KILL    no KILL at all: the abandon alone, at the next answered call
   Table (check.sh runs each line):
     (today)
     -DONE_LOOK
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
bool begun = 0;    /* the server read the batch */
bool closed = 0;   /* W's client closed the batch's connection */
bool gone = 0;     /* the batch's connection has ended on the server */

active proctype holder() {   /* release: the row, then the bell (TxOps.release_ringing) */
  rowh = 0;
  atomic { bell == 1 -> bell = 0 }
}

active proctype batch() {
  if
  :: begun = 1
  :: closed -> goto over   /* the close reached the server first: the batch is never read */
  fi;
  /* the bell's GET_LOCK: a wait the KILL interrupts */
  if
  :: atomic { bell == 0 -> bell = 2 }
  :: killed -> goto over
  fi;
  if :: killed -> goto over :: else fi;
  /* the name's GET_LOCK: granted even after the KILL when free; a wait the KILL interrupts */
  if
  :: atomic { namelock == 0 -> namelock = 2 }
  :: killed -> goto over
  fi;
  if :: killed -> goto over :: else fi;
  if :: !rowh && !roww -> pendw = 1 :: else fi;   /* INSERT ... WHERE no holder row */
  if :: killed -> goto over :: else fi;
  atomic { roww = pendw; pendw = 0 };               /* COMMIT */
  if :: killed -> goto over :: else fi;
  namelock = 0;                                      /* the name's lock goes, the bell stays (W's) */
  if :: closed :: killed fi;                         /* answered into a closed connection, or killed */
over:                                                /* the connection ends: rollback, named locks let go */
  atomic { pendw = 0; if :: namelock == 2 -> namelock = 0 :: else fi; if :: bell == 2 -> bell = 0 :: else fi;
           gone = 1 }
}

inline abandon() {   /* TxOps.abandon: the name's lock, then the deletes by W's token */
  atomic { namelock == 0 -> namelock = 3 };
  roww = 0;
  namelock = 0
}

inline kill() {   /* TxOps.end_bell_wait: only while the batch has begun and its connection is there */
  atomic { if :: begun && !gone -> killed = 1 :: else fi }
}

active proctype client() {
  bool ended = 0;
  closed = 1;
  /* at the give-up: KILL, then the abandon; each reaches the server, or not */
#if defined(NO_KILL)
  skip;
#elif defined(ONE_LOOK)
  if :: kill(); ended = 1 :: skip fi;
#else
  do
  :: gone -> ended = 1; break   /* a look the server answered: no connection left */
  :: kill()                    /* a look the server answered: KILL, and it is still there */
  :: break                     /* the server does not answer */
  od;
#endif
  if :: ended -> if :: abandon(); cleaned = 1; goto done :: skip fi :: else fi;
  /* the next call the server answers (MyLeaseMode._end_unended) */
#if defined(NO_KILL) || defined(NO_RETRY)
  skip;
#elif defined(ONE_LOOK)
  if :: !ended -> kill() :: else fi;
#else
  do
  :: gone -> break
  :: kill()
  od;
#endif
  abandon();
  cleaned = 1;
done:
  skip
}

active proctype monitor() {
  assert(!(cleaned && roww))
}
