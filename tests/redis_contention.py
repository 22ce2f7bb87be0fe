"""A contention worker: read-modify-write of a shared Redis counter under a lock (``python -m tests.redis_contention``).

    python -m tests.redis_contention ALGORITHM URL NAME TTL WORKDIR ID [hold|window]

ALGORITHM is ``distlock`` or a key of :data:`distlock.checker.broken.BROKEN` (the seeds' broken locks). The worker loops until
WORKDIR/stop exists: acquire; read the counter; sleep a little; write counter+1; release. With a fencing
token (distlock) the read and the write are *fenced*: the counter refuses any access carrying a fence lower
than the highest it has seen, so a holder that was paused past its lease cannot write a stale value. The
broken baselines have no fence and use plain GET/SET. At the end it prints ``ACCEPTED <n>``: the writes
the counter accepted. A ``hold`` victim prints ``HOLD`` once, right after its first read while holding (the
moment to pause or kill it); a ``window`` victim prints ``WINDOW`` once at a broken lock's fragile point and
sleeps there, to be killed in the middle of it.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import redis

import distlock
from distlock.checker.broken import BROKEN

COUNTER = "contention:{%s}:counter"
HIGHEST = "contention:{%s}:highest-fence"

#: fenced read: note the fence, refuse a stale one. KEYS: counter, highest fence; ARGV: fence
FENCED_READ = """
local highest = tonumber(redis.call('GET', KEYS[2]) or '0')
if tonumber(ARGV[1]) < highest then return -1 end
redis.call('SET', KEYS[2], ARGV[1])
return tonumber(redis.call('GET', KEYS[1]) or '0')
"""
#: fenced write. KEYS: counter, highest fence; ARGV: value, fence. Returns 1 if accepted.
FENCED_WRITE = """
local highest = tonumber(redis.call('GET', KEYS[2]) or '0')
if tonumber(ARGV[2]) < highest then return 0 end
redis.call('SET', KEYS[2], ARGV[2])
redis.call('SET', KEYS[1], ARGV[1])
return 1
"""


def main(algorithm: str, url: str, name: str, ttl: float, workdir: Path, role: str) -> None:
    client = redis.Redis.from_url(url)
    keys = [COUNTER % name, HIGHEST % name]
    read = client.register_script(FENCED_READ)
    write = client.register_script(FENCED_WRITE)
    stop = workdir / "stop"
    announced = {"HOLD": False, "WINDOW": False}

    def announce(what: str, pause: float = 0.0) -> None:
        if role == what.lower() and not announced[what]:
            announced[what] = True
            print(what, flush=True)
            time.sleep(pause)

    accepted = 0
    store = distlock.connect(url) if algorithm == "distlock" else None
    broken = None if store is not None else BROKEN[algorithm][0](url, name, ttl, workdir)
    if broken is not None:
        broken.hook = lambda point: announce("WINDOW", 3.0)
    try:
        while not stop.exists():
            if store is not None:
                lock = store.lock(name, ttl=ttl)
                if not lock.acquire(timeout=1.0):
                    continue
                fence = lock.fence
                assert fence is not None
                value = int(read(keys, [fence]))
                if value >= 0:
                    announce("HOLD")
                    time.sleep(0.005)
                    accepted += int(write(keys, [value + 1, fence]))
                try:
                    lock.release()
                except distlock.LockLost:
                    pass
            else:
                assert broken is not None
                if not broken.acquire(timeout=1.0):
                    continue
                value = int(client.get(keys[0]) or 0)
                announce("HOLD")
                time.sleep(0.005)
                client.set(keys[0], value + 1)
                accepted += 1
                broken.release()
    finally:
        if store is not None:
            store.close()
        if broken is not None:
            broken.close()
        print(f"ACCEPTED {accepted}", flush=True)
        client.close()


if __name__ == "__main__":
    algo, url, name, ttl, workdir, ident, *rest = sys.argv[1:]
    main(algo, url, name, float(ttl), Path(workdir), role=rest[0] if rest else "")
