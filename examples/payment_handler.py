"""A web handler guarding a payment: one charge per order, even when the customer double-clicks.

``pay(order_id)`` is what your web framework's route calls (Flask, Django, FastAPI: the same few lines). It
takes a lock per order with a short wait: a second request for the same order either waits for the first to
finish and then sees the order already paid, or gets ``409 Conflict`` if the first takes too long. The
order row is written with the lock's fencing token (``WHERE fence <= :fence``), so a request whose lock was
lost mid-way (a pause past the lease) cannot overwrite what a later holder wrote.

    python examples/payment_handler.py                    # 8 concurrent requests for one order, SQLite
    python examples/payment_handler.py --url redis://...  # the lock on Redis; the orders stay in SQLite here
"""

from __future__ import annotations

import argparse
import sqlite3
import tempfile
import threading
import time
from pathlib import Path

import distlock

CHARGES: list[str] = []  # the payment provider's ledger (a real provider's call goes here)
CHARGES_LOCK = threading.Lock()


def charge_card(order_id: int, amount: int) -> str:
    time.sleep(0.05)  # the provider's round trip
    with CHARGES_LOCK:
        CHARGES.append(f"order {order_id}: {amount}")
        return f"ch_{len(CHARGES)}"


def pay(store: distlock.Store, db_path: Path, order_id: int) -> tuple[int, str]:
    """The handler: returns (HTTP status, body)."""
    try:
        with store.lock(f"payment/order-{order_id}", ttl=30, timeout=5) as lock:
            db = sqlite3.connect(db_path)
            try:
                status, amount = db.execute("SELECT status, amount FROM orders WHERE id = ?", (order_id,)).fetchone()
                if status == "paid":
                    return 200, "already paid"  # idempotent: the double-click lands here
                charge = charge_card(order_id, amount)
                cur = db.execute(
                    "UPDATE orders SET status = 'paid', charge = ?, fence = ? WHERE id = ? AND fence <= ?",
                    (charge, lock.fence, order_id, lock.fence),
                )
                db.commit()
                if cur.rowcount != 1:  # a later holder wrote first: our lock was lost, do not claim success
                    return 409, "conflict: the order changed under us"
                return 201, f"paid ({charge})"
            finally:
                db.close()
    except distlock.AcquireTimeout:
        return 409, "another payment for this order is in progress"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default=None, help="store URL (default: a temporary SQLite file)")
    parser.add_argument("--requests", type=int, default=8)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        db_path = Path(tmp) / "shop.db"
        db = sqlite3.connect(db_path)
        db.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, amount INTEGER, status TEXT, charge TEXT,"
                   " fence INTEGER NOT NULL DEFAULT 0)")  # fmt: skip
        db.execute("INSERT INTO orders (id, amount, status) VALUES (42, 1999, 'open')")
        db.commit()
        db.close()
        responses: list[tuple[int, str]] = []
        with distlock.connect(args.url or f"sqlite:///{tmp}/locks.db") as store:
            threads = [
                threading.Thread(target=lambda: responses.append(pay(store, db_path, 42))) for _ in range(args.requests)
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        for code, body in sorted(responses):
            print(code, body)
        print(f"order 42 was charged {len(CHARGES)} time(s) for {args.requests} requests")
        return 0 if len(CHARGES) == 1 else 1


if __name__ == "__main__":
    raise SystemExit(main())
