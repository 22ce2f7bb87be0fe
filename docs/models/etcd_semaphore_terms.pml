/* etcd semaphore: its terms (declared, in force) live in every contender's record, nowhere else
   (docs/etcd.md, "Semaphores"). Three record slots (a contender's key, on its own lease); slot 0 is a holder at
   the start. Two newcomers each create a record (each may try twice), two resizers run set_permits once each
   (to 3 and to 4), and any
   record may go at any moment (a release, or its lease running out). `force` is a ghost: the capacity in force,
   set by the first record of a free semaphore and by the resize, cleared when the last record goes.
   Checked in every reachable state:
     terms: every live record carries the capacity in force
   The protocol:
     newcomer  reads the records (the newest live one's mod revision and terms; or that there is none), then one
               txn: create its record with those terms IF that record is still there with that mod revision
               (a free semaphore: IF there is still no record); else nothing is written and it reads again
     resizer   reads the records (at revision r), then one txn: rewrite every record it read with the new
               capacity IF each still has the mod revision it read AND no record has a mod revision above r
               (none created or written since the read)
   Variants (-D), each expected to FAIL the check:
     NO_SOURCE_GUARD  the newcomer creates its record whatever became of the one it copied from
     NO_QUIET         the resizer does not check that no record was created since its read
   Table (each line one run):
     (the protocol)
     -DNO_SOURCE_GUARD
     -DNO_QUIET
*/
#define NONE 9
#define DECLARED 2

byte rev = 1;
bool ex[3];
byte mod[3];
byte cap[3];
byte force = DECLARED;

init {
  atomic {
    ex[0] = 1; mod[0] = 1; cap[0] = DECLARED;
    run newcomer(1); run newcomer(2); run resizer(3); run resizer(4); run leaver()
  }
}

/* the newest live record other than `me` (slots are in creation order, as create revisions are) */
inline newest(me, src) {
  src = NONE;
  if :: ex[0] && me != 0 -> src = 0 :: else -> skip fi;
  if :: ex[1] && me != 1 -> src = 1 :: else -> skip fi;
  if :: ex[2] && me != 2 -> src = 2 :: else -> skip fi
}

proctype newcomer(byte me) {
  byte src, m, c, tries = 0;
  bool created = 0;
again:
  atomic {
    newest(me, src);
    if
    :: src != NONE -> m = mod[src]; c = cap[src]
    :: else -> c = DECLARED
    fi
  }
  atomic {
    if
#ifdef NO_SOURCE_GUARD
    :: src != NONE ->
#else
    :: src != NONE && ex[src] && mod[src] == m ->
#endif
       rev++; ex[me] = 1; mod[me] = rev; cap[me] = c; created = 1
    :: src == NONE && !ex[0] && !ex[1] && !ex[2] ->
       rev++; ex[me] = 1; mod[me] = rev; cap[me] = c; force = c; created = 1
    :: else -> tries++
    fi
  }
  if
  :: !created && tries < 2 -> goto again
  :: else -> skip
  fi
}

proctype resizer(byte n) {
  byte r, k;
  bool rex[3];
  byte rmod[3];
  bool ok;
  atomic {
    r = rev;
    k = 0;
    do :: k < 3 -> rex[k] = ex[k]; rmod[k] = mod[k]; k++ :: else -> break od
  }
  atomic {
    ok = (rex[0] || rex[1] || rex[2]);  /* a free semaphore: False, nothing written */
    k = 0;
    do
    :: k < 3 ->
       if :: rex[k] && !(ex[k] && mod[k] == rmod[k]) -> ok = 0 :: else -> skip fi;
#ifndef NO_QUIET
       if :: ex[k] && mod[k] > r -> ok = 0 :: else -> skip fi;
#endif
       k++
    :: else -> break
    od;
    if
    :: ok ->
       rev++; force = n;
       k = 0;
       do :: k < 3 -> if :: rex[k] -> cap[k] = n; mod[k] = rev :: else -> skip fi; k++ :: else -> break od
    :: else -> skip
    fi
  }
}

/* a release, or a lease that ran out: any record may go at any moment; the last one takes the terms along */
proctype leaver() {
  do
  :: atomic { ex[0] -> ex[0] = 0; if :: !ex[1] && !ex[2] -> force = 0 :: else -> skip fi }
  :: atomic { ex[1] -> ex[1] = 0; if :: !ex[0] && !ex[2] -> force = 0 :: else -> skip fi }
  :: atomic { ex[2] -> ex[2] = 0; if :: !ex[0] && !ex[1] -> force = 0 :: else -> skip fi }
  :: timeout -> break
  od
}

ltl terms { [] ((!ex[0] || cap[0] == force) && (!ex[1] || cap[1] == force) && (!ex[2] || cap[2] == force)) }
