#!/usr/bin/env python3
"""distlock's etcd backend against its peers on one loopback etcd cluster: ``peers.py --only etcd``.

    python benchmarks/etcd_peers.py [--url etcd://h1:p1,h2:p2,h3:p3] [--seconds 3] [--json FILE]
                                    [--only distlock,etcd3,tooz,raw,rawown]

Without ``--url`` it starts a 3-member cluster from Debian's ``etcd-server`` package (tools/servers/etcd.py),
with fsync on (the test suite turns it off; a benchmark should not). Rows, each if importable (the peers need
their own environment, see docs/etcd.md): distlock, python-etcd3's ``Lock`` (gRPC), tooz's ``etcd3+http``
driver (etcd3gw, the same JSON gateway distlock uses), and two floors measured uncontended only: one put per
round trip over the JSON gateway with httpx, and with distlock's own HTTP client (one replicated write per round
trip; a lock cycle needs at least two). What is measured, and how, is benchmarks/peers.py's (docs/bench.md).
"""

from __future__ import annotations

import base64
import json
import os
import sys
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))
# python-etcd3's generated code predates protobuf 4: the pure-Python implementation still loads it (set before
# anything imports protobuf; spawned workers inherit it)
os.environ.setdefault("PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION", "python")

from benchmarks._measure import TTL, Distlock, Lib, Pair  # noqa: E402


def first_endpoint(url: str) -> tuple[str, int]:
    host, port = url.split("://", 1)[1].split(",")[0].rsplit(":", 1)
    return host, int(port)


class Etcd3(Lib):
    name, key = "python-etcd3 Lock", "etcd3"

    def __init__(self, url: str) -> None:
        super().__init__(url)
        import etcd3

        host, port = first_endpoint(url)
        self.client = etcd3.client(host=host, port=port)

    def lock(self, name: str) -> Pair:
        lk = self.client.lock(f"bench/{name}", ttl=int(TTL))

        def acquire() -> None:
            assert lk.acquire(timeout=60)

        return acquire, lk.release

    def close(self) -> None:
        self.client.close()


class Tooz(Lib):
    name, key = "tooz etcd3gw", "tooz"

    def __init__(self, url: str) -> None:
        super().__init__(url)
        from tooz import coordination

        host, port = first_endpoint(url)
        self.coord = coordination.get_coordinator(f"etcd3+http://{host}:{port}", uuid.uuid4().hex.encode())
        self.coord.start()

    def lock(self, name: str) -> Pair:
        lk = self.coord.get_lock(f"bench-{name}".encode())

        def acquire() -> None:
            assert lk.acquire(blocking=60)

        return acquire, lk.release

    def close(self) -> None:
        self.coord.stop()


class RawPut(Lib):
    """A floor: one put per round trip over the JSON gateway (httpx, one kept-alive connection)."""

    name, key, floor = "raw put (httpx, JSON gateway)", "raw", True

    def __init__(self, url: str) -> None:
        super().__init__(url)
        import httpx

        host, port = first_endpoint(url)
        self.client = httpx.Client(base_url=f"http://{host}:{port}", trust_env=False)

    def lock(self, name: str) -> Pair:
        body = {"key": base64.b64encode(f"bench/raw/{name}".encode()).decode(), "value": ""}

        def put() -> None:
            self.client.post("/v3/kv/put", json=body).raise_for_status()

        return put, lambda: None

    def close(self) -> None:
        self.client.close()


class RawPutOwn(Lib):
    """The same floor over distlock's own HTTP/1.1 client (what the backend uses): the client's share of the
    round trip is smaller than with httpx."""

    name, key, floor = "raw put (distlock's HTTP client)", "rawown", True

    def __init__(self, url: str) -> None:
        super().__init__(url)
        from distlock._backends.etcd._sync.http import HTTPClient

        self.member = first_endpoint(url)
        self.client = HTTPClient(None)

    def lock(self, name: str) -> Pair:
        body = json.dumps({"key": base64.b64encode(f"bench/rawown/{name}".encode()).decode(), "value": ""}).encode()

        def put() -> None:
            assert self.client.post(self.member, "/v3/kv/put", body, {}, timeout=10, connect_timeout=10).status == 200

        return put, lambda: None

    def close(self) -> None:
        self.client.close()


LIBS: list[type[Lib]] = [Distlock, Etcd3, Tooz, RawPut, RawPutOwn]


def main() -> None:
    import argparse

    from benchmarks import peers

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", help="a cluster to use instead of starting one")
    ap.add_argument("--only", help="comma-separated rows: " + ",".join(c.key for c in LIBS))
    peers.add_common_options(ap)
    args = ap.parse_args()
    peers.run_and_report(args, ["etcd"], {"etcd": args.url} if args.url else {}, args.only)


if __name__ == "__main__":
    main()
