/* Session mode (MariaDB GET_LOCK, PostgreSQL advisory locks): what another session reads as the holder's fence.

   Who holds a name is the server's lock alone (GET_LOCK / pg_advisory_lock on the holder's connection); the
   statements around it decide what `inspect`, `check_fence` and a guarded write read as the holder's fence: the
   holding connection's fence row (MariaDB: a MEMORY table keyed by connection id) or its application_name
   (PostgreSQL: 'distlock|<fence>'). Per connection, not per name: a connection keeps its value between
   holdings, and is lent to one holding at a time. The fence is drawn from a sequence only once the lock is
   granted (a fence drawn before a wait could be passed by one drawn later by a holder that got in first).

   Two connections loop: acquire one name (a try or a blocking wait), hold, release. A reader looks at any moment
   and reads the holder and the holder's value in one step (MariaDB: its SELECT holds the MEMORY table's read
   lock, so no fence row changes under it, and IS_USED_LOCK is read once; PostgreSQL: pg_locks joined with
   pg_stat_activity read together). A server restart (at most once) ends every holding and empties the MEMORY
   table; the sequence survives it (a sequence may skip values, never go back).

   Checked:
     - whatever the reader finds as the holder's value is 0 (none shown) or the fence of the holding that holds
       now: never a fence of an earlier holding of the same connection (its owner released it, or lost it, and a
       stale write with it must be refused);
     - fences of successive holdings of the name strictly increase.

   Statement orders (as the code runs them, sql/session.py):
     MariaDB, try:   one INSERT ... SELECT CONNECTION_ID(), NEXTVAL(seq) FROM DUAL WHERE GET_LOCK(k, 0) = 1:
                     one step under the MEMORY table's write lock (the grant and the fence row together)
     MariaDB, wait:  UPDATE (fence = 0 for this connection); SELECT GET_LOCK(k, n); INSERT fence row WHERE
                     IS_USED_LOCK(k) = CONNECTION_ID(): three steps, others run between them
     MariaDB release: RELEASE_LOCK(k) (the row stays: shown only while its connection holds the lock)
     PostgreSQL (-DPG): one SELECT: the lock, then set_config(application_name, 'distlock|' || nextval(seq)):
                     two steps (no table lock orders a reader around them); the release: unlock, then
                     application_name back to 'distlock' (two steps)
   Breaking variants:
     NO_CLEAR        MariaDB's wait without the UPDATE first: between the grant and the INSERT, the connection's
                     row still holds its previous holding's fence, and a reader takes it for the holder's
     SPLIT_TRY       MariaDB's try as a GET_LOCK and then an INSERT (two statements): the same window
     PG_NO_RESET     PostgreSQL's release leaving application_name as it was: the next grant on the
                     connection shows the previous fence until its set_config

   Table (check.sh runs each line; the first two are the code as it runs):
     -DAS_TODAY
     -DPG
     -DNO_CLEAR
     -DSPLIT_TRY
     -DPG -DPG_NO_RESET
*/
#define ROUNDS 2

byte holder = 0;          /* the connection that holds the name's lock (1 or 2), 0: free */
byte shown[3];            /* per connection: the fence others read for it (MariaDB's row, PostgreSQL's app name) */
byte current[3];          /* per connection: the fence of the holding it has now (0: none, or not drawn yet) */
byte seq = 0;             /* the fence sequence (survives a restart) */
byte last = 0;            /* the fence of the name's latest holding */
bool restarted = false;

inline draw(c) {
  seq++;
  assert(seq > last);     /* fences of successive holdings strictly increase */
  last = seq;
  current[c] = seq
}

/* the connection ends its holding: released, or lost with a restart (then nothing it shows survives) */
inline ended(c) {
  current[c] = 0
}

proctype conn(byte c) {
  byte round = 0;
  do
  :: round == ROUNDS -> break
  :: round < ROUNDS ->
     round++;
#ifdef PG
     /* one SELECT: the lock (waiting, or a try that may fail), then the fence into application_name */
     atomic { holder == 0 -> holder = c };
     atomic { if :: holder == c -> draw(c); shown[c] = current[c] :: else -> skip fi };
#else
     if
     :: /* a try */
#ifdef SPLIT_TRY
        atomic { if :: holder == 0 -> holder = c :: else -> goto next fi };
        atomic { if :: holder == c -> draw(c); shown[c] = current[c] :: else -> skip fi };
#else
        atomic { if :: holder == 0 -> holder = c; draw(c); shown[c] = current[c] :: else -> goto next fi };
#endif
     :: /* a blocking wait */
#ifndef NO_CLEAR
        shown[c] = 0;
#endif
        atomic { holder == 0 -> holder = c };
        atomic { if :: holder == c -> draw(c); shown[c] = current[c] :: else -> skip fi }
     fi;
#endif
     /* holding (or lost to a restart meanwhile) */
     atomic { if :: holder == c -> holder = 0; ended(c) :: else -> ended(c) fi };
#ifdef PG
#ifndef PG_NO_RESET
     shown[c] = 0;
#endif
#endif
next: skip
  od
}

/* a server restart: every holding ends with its session, and the MEMORY table (or the sessions and their
   application_name) is gone */
active proctype restart() {
  atomic { !restarted -> restarted = true; holder = 0; shown[1] = 0; shown[2] = 0 }
}

/* inspect / check_fence / a guarded write: the holder and its value, read in one step */
active proctype reader() {
  byte h, f;
  do
  :: atomic {
       h = holder;
       if
       :: h != 0 -> f = shown[h]; assert(f == 0 || f == current[h])
       :: else -> skip
       fi
     }
  od
}

init {
  atomic { run conn(1); run conn(2) }
}
