"""Moving a held etcd key onto another lease: a put guarded by the key's create revision, which keeps that revision,
so the fence, the queue place and the Go layout stay. ``extend(ttl=...)`` past a lease's TTL moves it to a longer
lease (``relet``), ``shorten`` to a fresh shorter one nobody keeps alive, and the release of a write a read was
taken under (a downgrade) onto that read's lease (``Backend._release_under``).
"""

from __future__ import annotations

from ...._core.types import Mode
from .. import keys, ops
from .gateway import Gateway
from .leases import Lease, LeasePool
from .mutex import Entry


class Moves:
    """The moves of this store's held keys between leases (``Backend.moves``)."""

    def __init__(self, gw: Gateway, leases: LeasePool) -> None:
        self.gw = gw
        self.leases = leases

    async def relet(self, entry: Entry, ttl: float) -> None:
        """Move a held key to a new, longer lease (``extend(ttl=...)`` beyond the lease's TTL).

        A put on an existing key keeps its create revision, so the fence and the queue place stay.
        """
        new = await self.leases.take(ttl)
        old = entry.lease
        if await self.move(entry, new):
            entry.lease = new
            await self.leases.revoke(old.id)
        else:
            await self.leases.revoke(new.id)

    async def shorten(self, entry: Entry, ttl: float) -> bool:
        """A lease's TTL is fixed when it is granted: grant a fresh one of ``ttl`` (whole seconds, rounded up;
        the server raises it to its minimum), move the key to it with a put guarded by the key's create
        revision (the fence, the queue place and the Go layout stay), and revoke the old lease. The new lease
        is nobody's to keep alive, so the key goes when it runs out."""
        new = await self.leases.take(ttl, fresh=True)
        # on an error the outcome is unknown: both leases are left to run out (nobody keeps them alive), as
        # revoking either could delete the key before its time
        moved = await self.move(entry, new)
        await self.leases.revoke(entry.lease.id)  # its key moved to the new lease, or is gone
        if not moved:
            await self.leases.revoke(new.id)
        return moved

    async def move(self, entry: Entry, lease: Lease) -> bool:
        """Put the held key on ``lease`` if it still has the holding's create revision; False if it has gone."""
        if keys.mode_of(keys.lock_prefix(entry.name), entry.key) is Mode.SEMAPHORE:
            return await self._move_record(entry, lease)
        data = await self.gw.call(
            "/v3/kv/txn",
            {
                "compare": [ops.create_is(entry.key, entry.rev)],
                "success": [ops.put_op(entry.key, entry.value, lease.id)],
            },
        )
        return bool(data.get("succeeded"))

    async def _move_record(self, entry: Entry, lease: Lease) -> bool:
        """``move`` of a semaphore holding: its record as it is now (a resize by ``set_permits`` rewrote the terms
        in it, which every record must carry), put if nobody wrote it since the read; read again if somebody did."""
        while True:
            data = await self.gw.call("/v3/kv/range", ops.range_op(entry.key, keys_only=False))
            now = [kv for kv in data.get("kvs") or [] if int(kv.get("create_revision") or 0) == entry.rev]
            if not now:
                return False
            value, mod = ops.unb64(now[0].get("value")), int(now[0].get("mod_revision") or 0)
            moved = await self.gw.call(
                "/v3/kv/txn",
                {"compare": [ops.create_is(entry.key, entry.rev), ops.mod_is(entry.key, mod)],
                 "success": [ops.put_op(entry.key, value, lease.id)]},
            )  # fmt: skip
            if moved.get("succeeded"):
                entry.value = value
                return True
