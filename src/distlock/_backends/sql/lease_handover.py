"""The direct hand-over of PostgreSQL's lease mode (``AutocommitOps.release``): the release statement that
grants the name to its first queued exclusive waiter, and the reading of its answer.

No I/O. The protocol of ``docs/models/sql_lease_handover.pml`` (HANDOVER with ONE_STATEMENT_RELEASE, TRUST,
STAMP, KEEP). The waiter's side is the autocommit protocol's tries (``lease_autocommit.py``: a queue entry
that carries its owner record and its store's reply channel, a try that CONFIRMs a row a release made for
it); the NOTIFY's payload is ``names.py``'s ``HandOver``.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..._core.types import Claim, Mode
from .lease import LAYOUT, LeaseOps, Released
from .names import HandOver
from .stmt import Stmt, to_float, to_int


def release_stmt(ops: LeaseOps, claim: Claim, key: str, t: str) -> Stmt:
    """The release as the direct hand-over: ONE autocommit statement, without the name's lock
    (``docs/models/sql_lease_handover.pml``, HANDOVER with ONE_STATEMENT_RELEASE). It deletes our row and
    the holder rows expired at its clock (expired queue entries are left to the tries and the sweep: the
    promotion looks at live entries only, and deleting them cost O(waiters) per release), and if

    * our row was still live at its clock (the DELETE finds the latest committed version: a try that took
      the name over once our lease ran out deleted it first, and then nothing is promoted; while our row
      is live no try can be granted, so no holder row can appear that this statement's snapshot misses),
    * its snapshot shows no other live holder (readers), and the DELETE removed every row the snapshot
      saw expired (a renewal that committed while the DELETE waited for its row lock keeps its row, as in
      ``sql_lease_statement.pml``'s RECHECK_COUNT), and
    * the first live queue entry is an exclusive claim that carries its owner record,

    it deletes that entry and inserts a holder row for its waiter from what that DELETE returned (an
    entry its waiter deleted meanwhile is promoted to nothing): fence drawn, lease end = the entry's
    queue deadline, not a TTL (a waiter that died while queued holds no longer than its entry would have
    blocked the queue, F12; ``PROMOTE_TTL`` fails). The NOTIFY names the waiter (``token_digest``),
    its fence and that lease end, the stamp the waiter compares with the deadline its last refused try
    wrote before it holds on the NOTIFY alone. One round trip, as the plain release was (a bigger statement:
    about 0.27 ms against 0.15 ms on an idle connection of the project's VM). ``t``: the statement's clock;
    its answer is read by ``released``."""
    p = ops.p
    others = f"FROM {p}_holders WHERE name_key = %s AND token <> %s"  # our own row is ``d``'s
    channel = (
        "CASE WHEN pr.digest IS NULL THEN %s ELSE COALESCE((SELECT reply FROM dq), %s) END"
        if ops.replies
        else "%s"
    )
    payload = "%s || COALESCE('|' || pr.digest || '|' || pr.fence || '|' || pr.expires_at::text, '')"
    return Stmt(
        f"WITH d AS (DELETE FROM {p}_holders WHERE token = %s RETURNING expires_at), "
        f"seen AS (SELECT COUNT(*) AS n {others} AND expires_at <= {t}), "
        f"del AS (DELETE {others} AND expires_at <= {t} RETURNING 1), "
        f"hd AS (SELECT token FROM {p}_queue WHERE name_key = %s AND expires_at > {t} ORDER BY seq LIMIT 1), "
        f"dq AS (DELETE FROM {p}_queue WHERE token = (SELECT token FROM hd) AND mode IN (%s, %s) "
        f"AND owner IS NOT NULL AND (SELECT expires_at FROM d) > {t} "
        f"AND NOT EXISTS (SELECT 1 {others} AND expires_at > {t}) "
        "AND (SELECT COUNT(*) FROM del) = (SELECT n FROM seen) "
        f"RETURNING token, name, mode, owner, expires_at{', reply' if ops.replies else ''}), "
        f"pr AS (INSERT INTO {p}_holders (token, name_key, name, owner, mode, fence, expires_at, acquired_at, "
        f"layout) SELECT token, %s, name, owner, mode, nextval('{p}_fence_seq'), expires_at, {t}, {LAYOUT} "
        "FROM dq ON CONFLICT (token) DO NOTHING "
        "RETURNING left(encode(sha256(convert_to(token, 'UTF8')), 'hex'), 32) AS digest, fence, expires_at) "
        f"SELECT COALESCE((SELECT expires_at FROM d) > {t}, false), pr.digest, pr.fence, pr.expires_at, "
        # a hand-over goes to the promoted waiter's store alone (its reply channel), a wake-up to every store
        f"{ops._wake(f'{channel}, {payload}')} FROM (SELECT 1) one LEFT JOIN pr ON true",
        (
            claim.token,
            key,
            claim.token,
            key,
            claim.token,
            key,
            Mode.EXCLUSIVE.value,
            Mode.WRITE.value,
            key,
            claim.token,
            key,
            *((ops.channel,) * (2 if ops.replies else 1)),
            key,
        ),
    )


def released(row: Sequence[object]) -> Released:
    """Whether our row was live at the release's clock, and the hand-over it made (None: nobody was granted)."""
    live, digest_, fence, stamp, _ = row
    handed = None if fence is None else HandOver(str(digest_), to_int(fence), to_float(stamp))
    return bool(live), handed
