/* Redis: the abandon of an acquire whose try was let go of mid-call (attempt.py ``_cut``, lua ABANDON's cut
   mark and ACQUIRE's check).
   The client W sent its try (the ACQUIRE script, one atomic step on the server) on one connection and gave up
   before the answer (cancelled, timed out): that connection is closed, and the try still runs on the server
   once, or never (the close came first). W's abandon (the ABANDON script, atomic too) goes on another
   connection: Redis runs the two connections' scripts in either order. The name is free meanwhile (the worst
   case: the try grants).
   The mark lasts as long as the client waits for any answer; a try that reaches the server later still is
   outside the model (docs/redis.md, F10, says what it may leave).
   Checked in every reachable state:
     orphan:  once W's abandon has run, W has no holding (none appears later either)
   Variants (-D):
     NO_MARK   the abandon deletes by token and leaves no mark (before)
   Table (check.sh runs each line):
     (today)
     -DNO_MARK
*/

bool held = 0;      /* W's token holds the name */
bool marked = 0;    /* gone|token in {N}:qd */
bool abandoned = 0; /* W's abandon has run */

active proctype try_script() {   /* ACQUIRE for W's token: the mark first, then the grant of a free name */
  if
  :: atomic { if :: !marked -> held = 1 :: else fi }
  :: skip   /* the close reached the server first: the try never runs */
  fi
}

active proctype client() {   /* ABANDON: the deletes by token, and the mark for a try let go of mid-call */
  atomic {
    held = 0;
#ifndef NO_MARK
    marked = 1;
#endif
    abandoned = 1
  }
}

active proctype monitor() {
  assert(!(abandoned && held))
}
