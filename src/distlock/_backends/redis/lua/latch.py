"""The two Lua scripts of a count-down latch (single node and Redis Cluster): each gets one key, the latch's
``{N}:latch`` hash (``keys.latch_key``), and runs by ``EVAL`` (a latch call is rare: no script cache to keep
loaded). They share none of the lock scripts' prelude (they touch no key of a lock), only the one-key type
guard of ``prelude.py``. No I/O here.

A key of the latch that holds another type than a hash was made by something else: both refuse it before
writing (``DISTLOCK-WRONGTYPE``, as the lock scripts do).
"""

from __future__ import annotations

import hashlib

from ...._core.latch import RECENT
from .prelude import one_key_guard

_GUARD = one_key_guard("hash", "a latch (a hash)")

#: ARGV: count ('' = only read), round id. Reply: {round, initial, count}, or nil when there is no latch.
#: With a count, a missing latch is created with it first.
OPEN = (
    _GUARD
    + """
if t == 'none' then
  if ARGV[1] == '' then return false end
  redis.call('HSET', KEYS[1], 'round', ARGV[2], 'initial', ARGV[1], 'count', ARGV[1])
end
return redis.call('HMGET', KEYS[1], 'round', 'initial', 'count')
"""
)


#: ARGV: channel, round id, step id (32 hex characters), linger (ms). Reply: the count after (0 also when the
#: latch is gone, at zero or of another round: nothing is taken off then; a step already counted: the count
#: now). The step that reaches 0 lets the key expire after the linger (the done marker) and publishes on the
#: channel.
COUNT_DOWN = (
    _GUARD
    + """
local v = redis.call('HMGET', KEYS[1], 'round', 'count', 'recent')
local n = tonumber(v[2])
if v[1] ~= ARGV[2] or n == nil then return 0 end
local recent = v[3] or ''
if string.find(recent, ARGV[3], 1, true) then return n end
if n <= 0 then return 0 end
n = redis.call('HINCRBY', KEYS[1], 'count', -1)
recent = recent .. ARGV[3] .. ' '
local keep = """
    + str(RECENT * 33)
    + """
if #recent > keep then recent = string.sub(recent, #recent - keep + 1) end
redis.call('HSET', KEYS[1], 'recent', recent)
if n == 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[4])
  redis.call('PUBLISH', ARGV[1], '0')
end
return n
"""
)

SCRIPTS: dict[str, str] = {"latch_open": OPEN, "latch_count_down": COUNT_DOWN}
SHA: dict[str, str] = {k: hashlib.sha1(v.encode()).hexdigest() for k, v in SCRIPTS.items()}
