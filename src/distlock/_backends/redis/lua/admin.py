"""The scripts that look at or act on a name from outside its holdings: ``INSPECT`` (the holders, the waiters),
``BREAK`` (an admin's forced release), ``REQUEST`` (a release request to the holders) and an election's
``PROCLAIM`` (a new value from the leader, which wakes the observers). Each starts with the shared ``PRELUDE``. No I/O here.
"""

from __future__ import annotations

from .prelude import PRELUDE

INSPECT = (
    PRELUDE
    + """
-- ARGV: 1 channel.  Returns {exclusive holder value or '', its PTTL ms, readers {token, end, ...},
--   permits {token, end, ...}, details {token, "mode|fence|owner", ...}, live waiters, now ms,
--   a semaphore's terms {declared, capacity} (false where none), the permits its live waiters want}
tick()
local holder = redis.call('GET', KEYS[1])
local wanted, waiting = 0, 0
for _, m in ipairs(redis.call('ZRANGEBYSCORE', KEYS[6], '(' .. now, '+inf')) do
  if string.sub(m, 1, 10) == 'semaphore|' then wanted = wanted + tonumber(redis.call('HGET', KEYS[9], m) or '1') end
  if string.sub(m, 1, 5) ~= 'gone|' then waiting = waiting + 1 end  -- an abandoned try's cut mark: no waiter
end
return {
  holder or '',
  redis.call('PTTL', KEYS[1]),
  redis.call('ZRANGEBYSCORE', KEYS[2], '(' .. now, '+inf', 'WITHSCORES'),
  redis.call('ZRANGEBYSCORE', KEYS[3], '(' .. now, '+inf', 'WITHSCORES'),
  redis.call('HGETALL', KEYS[4]),
  waiting,
  now,
  redis.call('HMGET', KEYS[11], 'd', 'c'),
  wanted,
}
"""
)

BREAK = (
    PRELUDE
    + """
-- ARGV: 1 channel.  Admin force release of every holding (also a foreign one, e.g. a redis-py Lock);
-- wakes every waiter. Returns the tokens that held it.
tick()
local out = {}
local holder = redis.call('GET', KEYS[1])
if holder then table.insert(out, holder) end
for _, set in ipairs({KEYS[2], KEYS[3]}) do
  for _, tk in ipairs(redis.call('ZRANGEBYSCORE', set, '(' .. now, '+inf')) do table.insert(out, tk) end
end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4])
purge()
tidy_terms()
absorb()
redis.call('PUBLISH', channel, '*')
return out
"""
)

PROCLAIM = (
    PRELUDE
    + """
-- ARGV: 1 channel, 2 token, 3 record (the owner id, 0x1F, the new value).  Elections: if the token still holds
-- the exclusive key, make `record` the owner part of its details (mode and fence kept) and wake the observers.
-- Returns 1, or 0 if the token does not hold the name. The holding (key, lease) and the fence counter are not
-- touched: on Redlock the fence rule (FENCE_FLOOR, docs/models/redlock_fence.pml) does not see a proclaim.
local token, record = ARGV[2], ARGV[3]
if redis.call('GET', KEYS[1]) ~= token then return 0 end
local inf = redis.call('HGET', KEYS[4], token)
if inf then
  local a = string.find(inf, '|', 1, true)
  local b = string.find(inf, '|', a + 1, true)
  redis.call('HSET', KEYS[4], token, string.sub(inf, 1, b) .. record)
else
  -- details always outlive the key they describe; should they be gone, keep the new ones no longer than it
  redis.call('HSET', KEYS[4], token, 'lock|-1|' .. record)
  tick()
  keep_until(KEYS[4], now + math.max(1, redis.call('PTTL', KEYS[1])))
end
notice()
return 1
"""
)

REQUEST = (
    PRELUDE
    + """
-- ARGV: 1 channel, 2 request id, 3 reason.  A release request to every live holder with a details record (a
-- distlock holder: a foreign one could not read it): the field '<token>!r' = 'revoke|-1|<id>|<reason>' in
-- the details hash, which the holder's renewal returns to it. The hash lives as long as the name's longest
-- lease, and the holder's release (or abandon, or the next grant after its lease ran out) deletes the field
-- with its own record: the request goes with the holding. Nothing is written for a free name. Returns the
-- number of holders asked.
tick()
local asked = 0
local function ask(tk)
  if redis.call('HEXISTS', KEYS[4], tk) == 1 then
    redis.call('HSET', KEYS[4], tk .. '!r', 'revoke|-1|' .. ARGV[2] .. '|' .. ARGV[3])
    asked = asked + 1
  end
end
local holder = redis.call('GET', KEYS[1])
if holder then ask(holder) end
for _, set in ipairs({KEYS[2], KEYS[3]}) do
  for _, tk in ipairs(redis.call('ZRANGEBYSCORE', set, '(' .. now, '+inf')) do ask(tk) end
end
return asked
"""
)
