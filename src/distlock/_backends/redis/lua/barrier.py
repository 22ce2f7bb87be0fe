"""The two Lua scripts of a barrier (single node and Redis Cluster): each gets one key, the barrier's string
(``keys.barrier_key``), and runs by ``EVAL``. The record's rules are in Python (``_core/barrier.py``): Redis
only reads it and replaces it whole if nobody changed it since (compare-and-set). No I/O here.

A key of the barrier that holds another type than a string was made by something else: both refuse it before
writing (``DISTLOCK-WRONGTYPE``, as the lock scripts do).
"""

from __future__ import annotations

from .prelude import one_key_guard

_GUARD = one_key_guard("string", "a barrier (a string)")

#: Reply: the record ('' when there is none).
READ = _GUARD + "return redis.call('GET', KEYS[1]) or ''\n"

#: ARGV: the record as read ('' = none), the new record ('' = delete it), its lifetime in ms. Reply: 1 written,
#: 0 the record changed since it was read (nothing written).
CAS = (
    _GUARD
    + """
local cur = redis.call('GET', KEYS[1]) or ''
if cur ~= ARGV[1] then return 0 end
if ARGV[2] == '' then redis.call('DEL', KEYS[1]) else redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3]) end
return 1
"""
)
