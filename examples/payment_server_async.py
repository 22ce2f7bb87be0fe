"""An asyncio web service guarding a payment with the lock's fencing token (standard library only).

``POST /orders/<id>/pay`` takes ``store.lock("payment/order-<id>")`` on a store from ``connect_async``, checks
the order is not paid yet, charges the card (with the order as the provider's idempotency key), and writes the
order row only if the lock's fence is at least the last fence the row has seen (``WHERE fence <= :fence``).

The demonstration runs two instances of the service (as behind a load balancer), each on its own event loop:

* a double-click: concurrent requests for one order, on both instances: one charge, one ``201``, the others
  ``200 already paid`` (or ``409`` if the first took longer than the wait);
* a stale writer: instance A's event loop freezes (a GC pause, a VM freeze, a blocking call in async code:
  nothing of it runs, lock renewal included) between its last check and its write; its lease runs out, the
  customer's retry lands on instance B, which takes the lock with a larger fence and writes. When A wakes up,
  its write carries the older fence and the row refuses it: ``409``, and the order keeps B's write.

    python examples/payment_server_async.py                      # the demonstration, on a temporary SQLite store
    python examples/payment_server_async.py --url redis://...    # the lock on Redis; the orders stay in SQLite
    python examples/payment_server_async.py --serve 8080         # one instance: curl -X POST :8080/orders/42/pay
"""

from __future__ import annotations

import argparse
import asyncio
import http
import re
import sqlite3
import tempfile
import threading
from collections.abc import Awaitable, Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import distlock

TTL = 3.0  # the lock's lease, renewed by the store every TTL/3 while the handler runs (short for the demo)
WAIT = 10.0  # how long a request waits for another request's payment of the same order


class Orders:
    """The resource: a SQLite table. Its calls run in a worker thread, off the event loop."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def run(self, sql: str, *params: object) -> tuple[list[Any], int]:
        """One statement, committed, on a connection of the calling thread: (its rows, the rows it changed)."""
        with closing(sqlite3.connect(self.path)) as db, db:
            cur = db.execute(sql, params)
            return cur.fetchall(), cur.rowcount

    async def create(self, order_id: int, amount: int) -> None:
        await asyncio.to_thread(self.run, "INSERT INTO orders (id, amount, status) VALUES (?, ?, 'open')",
                                order_id, amount)  # fmt: skip

    async def get(self, order_id: int) -> tuple[str, int, str | None, int]:
        """(status, amount, charge, fence) of the order."""
        sql = "SELECT status, amount, charge, fence FROM orders WHERE id = ?"
        rows, _ = await asyncio.to_thread(self.run, sql, order_id)
        row: tuple[str, int, str | None, int] = rows[0]
        return row

    async def mark_paid(self, order_id: int, charge: str, fence: int) -> bool:
        """The fenced write: False when a holder with a larger fence has written the row already."""
        sql = "UPDATE orders SET status = 'paid', charge = ?, fence = ? WHERE id = ? AND fence <= ?"
        _, changed = await asyncio.to_thread(self.run, sql, charge, fence, order_id, fence)
        return changed == 1


class Provider:
    """The payment provider. Like real ones it takes an idempotency key: a second charge with the same key
    returns the first charge instead of charging again (a lock that was lost cannot promise that on its own)."""

    def __init__(self) -> None:
        self.charges: dict[str, str] = {}
        self._guard = threading.Lock()  # both instances' threads call it

    async def charge(self, amount: int, idempotency_key: str) -> str:
        await asyncio.sleep(0.05)  # the provider's round trip
        with self._guard:
            return self.charges.setdefault(idempotency_key, f"ch_{len(self.charges) + 1}_{amount}")


class Service:
    """One instance of the web service: its own event loop, its own store, the shared orders and provider."""

    def __init__(self, store: distlock.AsyncStore, orders: Orders, provider: Provider) -> None:
        self.store = store
        self.orders = orders
        self.provider = provider
        self.pause: Callable[[], None] | None = None  # the demo's freeze, see ``pay``

    async def pay(self, order_id: int) -> tuple[int, str]:
        """The handler: (HTTP status, body)."""
        try:
            async with self.store.lock(f"payment/order-{order_id}", ttl=TTL, timeout=WAIT) as lock:
                outcome = await self.charge_and_write(order_id, lock.fence, lock.lost)
        except distlock.AcquireTimeout:
            return 409, "another payment for this order is in progress"
        except distlock.LockLost:
            pass  # raised by the release at the end of the block: the fenced write has already decided
        return outcome

    async def charge_and_write(self, order_id: int, fence: int, lost: asyncio.Event) -> tuple[int, str]:
        status, amount, charge, _ = await self.orders.get(order_id)
        if status == "paid":
            return 200, f"already paid ({charge})"  # idempotent: the double-click lands here
        charge = await self.provider.charge(amount, idempotency_key=f"order-{order_id}")
        if lost.is_set():  # ask before writing (true once the lease end passed, even on a late loop) ...
            return 409, "the lock was lost while charging: retry"
        if self.pause is not None:
            self.pause()  # ... but a freeze can still fall between that check and the write: the fence is for it
        if not await self.orders.mark_paid(order_id, charge, fence):
            return 409, f"conflict: a newer holder wrote the order, this request's fence {fence} is stale"
        return 201, f"paid ({charge}, fence {fence})"

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """A minimal HTTP/1.1 exchange: one request, one response, then the connection closes."""
        try:
            method, target, _ = (await reader.readline()).decode("latin-1").split(" ", 2)
            while (await reader.readline()).strip():  # the headers: none needed here
                pass
            match = re.fullmatch(r"/orders/(\d+)/pay", target)
            status, body = await self.pay(int(match[1])) if method == "POST" and match else (404, "not found")
            data = body.encode()
            head = f"HTTP/1.1 {status} {http.HTTPStatus(status).phrase}\r\nContent-Type: text/plain\r\n"
            writer.write(f"{head}Content-Length: {len(data)}\r\nConnection: close\r\n\r\n".encode() + data)
            await writer.drain()
        finally:
            writer.close()
            await writer.wait_closed()


async def serve(url: str | None, orders: Orders, provider: Provider, port: int, ready: Callable[[Service, int],
                None] | None = None, stop: Awaitable[object] | None = None) -> None:  # fmt: skip
    """Run one instance on 127.0.0.1:``port`` (0: any free port) until ``stop`` (None: for ever)."""
    async with distlock.connect_async(url) as store:
        service = Service(store, orders, provider)
        server = await asyncio.start_server(service.handle, "127.0.0.1", port)
        async with server:
            if ready is not None:
                ready(service, server.sockets[0].getsockname()[1])
            await (stop if stop is not None else server.serve_forever())


class Instance:
    """An instance of the service on its own thread and event loop, for the demonstration."""

    def __init__(self, url: str, orders: Orders, provider: Provider) -> None:
        self._started = threading.Event()
        self._thread = threading.Thread(target=asyncio.run, args=(self._run(url, orders, provider),))
        self._thread.start()
        if not self._started.wait(60):
            raise RuntimeError("the instance did not start")

    async def _run(self, url: str, orders: Orders, provider: Provider) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        await serve(url, orders, provider, 0, self._ready, self._stop.wait())

    def _ready(self, service: Service, port: int) -> None:
        self.service, self.port = service, port
        self._started.set()

    def close(self) -> None:
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(60)


async def post(port: int, path: str) -> tuple[int, str]:
    """The client side: POST ``path``, return (status, body)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n\r\n".encode())
    await writer.drain()
    status_line, _, rest = (await reader.read()).decode().partition("\r\n")
    writer.close()
    await writer.wait_closed()
    return int(status_line.split()[1]), rest.partition("\r\n\r\n")[2]


async def demonstrate(a: Instance, b: Instance, orders: Orders, provider: Provider, requests: int) -> bool:
    await orders.create(42, 1999)
    answers = await asyncio.gather(*(post((a, b)[i % 2].port, "/orders/42/pay") for i in range(requests)))
    for status, body in sorted(answers):
        print(f"order 42: {status} {body}")
    print(f"order 42 was charged {len(provider.charges)} time(s) for {requests} requests")
    once = len(provider.charges) == 1 and [s for s, _ in answers].count(201) == 1

    await orders.create(7, 500)
    frozen, resume = threading.Event(), threading.Event()

    def freeze() -> None:  # blocks instance A's event loop (its lease renewal too) until resumed
        frozen.set()
        resume.wait(60)

    a.service.pause = freeze
    first = asyncio.create_task(post(a.port, "/orders/7/pay"))
    await asyncio.to_thread(frozen.wait, 60)
    print("order 7: instance A holds the lock and froze before its write; the retry goes to instance B")
    retry = await post(b.port, "/orders/7/pay")  # waits for A's lease to run out, then takes a larger fence
    print(f"order 7, instance B: {retry[0]} {retry[1]}")
    resume.set()  # A wakes up, believing it holds the lock, and writes
    stale = await first
    print(f"order 7, instance A: {stale[0]} {stale[1]}")
    paid, _, charge, fence = await orders.get(7)
    print(f"order 7 row: {paid}, charge {charge}, fence {fence}")
    return once and retry[0] == 201 and stale[0] == 409 and f"fence {fence}" in retry[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default=None, help="store URL (default: a temporary SQLite file)")
    parser.add_argument("--requests", type=int, default=6, help="concurrent requests for one order")
    parser.add_argument("--serve", type=int, metavar="PORT", help="run one instance on 127.0.0.1:PORT instead")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        orders = Orders(Path(tmp) / "shop.db")
        orders.run("CREATE TABLE orders (id INTEGER PRIMARY KEY, amount INTEGER, status TEXT, charge TEXT,"
                    " fence INTEGER NOT NULL DEFAULT 0)")  # fmt: skip
        url = args.url or f"sqlite:///{tmp}/locks.db"
        if args.serve is not None:
            orders.run("INSERT INTO orders (id, amount, status) VALUES (42, 1999, 'open')")
            asyncio.run(serve(url, orders, Provider(), args.serve))
            return 0
        provider = Provider()
        a = Instance(url, orders, provider)
        b = Instance(url, orders, provider)
        try:
            ok = asyncio.run(demonstrate(a, b, orders, provider, args.requests))
        finally:
            a.close()
            b.close()
        return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
