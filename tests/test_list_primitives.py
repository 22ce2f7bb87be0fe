"""``distlock list`` shows latches and barriers where the backend can list them (all but Redlock), through the
store's ``_list_primitives`` on real servers, and once through the command line."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import distlock


@pytest.mark.parametrize("row", ["sqlite", "redis", "etcd", "zookeeper", "mysql", "postgres"])
def test_latches_and_barriers_are_listed(row: str, name: str, request: pytest.FixtureRequest) -> None:
    url = str(request.getfixturevalue(f"{row}_url"))
    with distlock.connect(url) as store:
        assert store._list_primitives(name) == []  # nothing yet: and the listing made no table
        latch = store.latch(name + "/latch", 3)
        assert latch.count_down() == 2
        gate = store.barrier(name + "/gate", 2, ttl=5)
        waiter = threading.Thread(target=gate.wait, kwargs={"timeout": 10})
        waiter.start()
        try:
            deadline = time.monotonic() + 10
            while len(found := store._list_primitives(name) or []) < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
            shown = {p.name: p.to_json() for p in found}
            assert shown[name + "/latch"] == {"name": name + "/latch", "kind": "latch", "count": 2, "initial": 3}
            assert shown[name + "/gate"] == {"name": name + "/gate", "kind": "barrier", "arrived": 1, "tripped": 0}
            assert store._list_primitives(name + "/latch") == [found[1]]  # by prefix
        finally:
            assert store.barrier(name + "/gate", 2, ttl=5).wait(timeout=10)
            waiter.join(10)


def test_list_prints_them_after_the_locks(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/locks.db"
    with distlock.connect(url) as store:
        store.latch("deploy", 2).count_down()
        with store.lock("job"):
            run = [sys.executable, "-m", "distlock", "--url", url, "list"]
            text = subprocess.run(run, capture_output=True, text=True, timeout=60, check=True).stdout
            out = subprocess.run([*run, "--json"], capture_output=True, text=True, timeout=60, check=True).stdout
    assert text.splitlines()[-2:] == ["NAME    KIND   STATE", "deploy  latch  1 of 2 left"], text
    assert [o["kind"] for o in json.loads(out)] == ["lock", "latch"]
