"""The prelude every Redis script starts with: the key-type guard, and the Lua helpers the scripts share (the
server clock, the fence counter's bump, the purge of expired entries, the queue and its wake-ups, the election's
notice). One text, so a change to a helper changes every script's SHA at once. No I/O here.
"""

from __future__ import annotations

from ..keys import NOTICE

#: the error every script raises, before it writes anything, when a key of the name holds another type
WRONGTYPE = "DISTLOCK-WRONGTYPE"


def one_key_guard(shape: str, keeps: str) -> str:
    """The key-type guard of a script on one key (``KEYS[1]``) that distlock keeps as a Redis ``shape``
    (``keeps``: what it is, e.g. "a latch (a hash)"): refused with ``WRONGTYPE`` before anything is written.
    The barrier's and the latch's scripts start with it; ``t`` (the key's type) stays set for the rest."""
    return (
        """
local t = redis.call('TYPE', KEYS[1])['ok']
if t ~= 'none' and t ~= '"""
        + shape
        + """' then
  return redis.error_reply('"""
        + WRONGTYPE
        + """ the key ' .. KEYS[1] .. ' holds a ' .. t .. ' where distlock keeps """
        + keeps
        + """: something else than distlock made it; nothing was written (use another name, or remove that key)')
end
"""
    )


PRELUDE = (
    """
local now = nil
local now_us = nil
local channel = ARGV[1]

-- Before anything is written: a key of the name (or the counter) that holds another type than the one distlock
-- keeps there was made by something else. Refuse the call then, with nothing written: Redis does not roll a
-- script back, so a type error half-way would leave the writes made before it. One EXISTS counts the name's
-- keys (`present`); the counter is looked at always; a free name's keys need nothing more (two commands: the
-- hot path of an acquire), a simply held name's key and details are looked at, and the other eight only if
-- more keys exist than those two (four commands: the hot path of a release).
local present = redis.call('EXISTS', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[9], KEYS[10], KEYS[11])
do
  local shapes = {'string', 'zset', 'zset', 'hash', 'zset', 'zset', 'string', 'hash', 'hash', 'hash', 'hash'}
  local order = {8}
  if present > 0 then order = {8, 1, 4, 2, 3, 5, 6, 7, 9, 10, 11} end
  local seen = 0
  for n, i in ipairs(order) do
    if n > 3 and seen >= present then break end
    local t = redis.call('TYPE', KEYS[i])['ok']
    if t ~= 'none' then
      if t ~= shapes[i] then
        return redis.error_reply('"""
    + WRONGTYPE
    + """ the key ' .. KEYS[i] .. ' holds a ' .. t .. ' where distlock keeps a ' .. shapes[i] .. ': something else than distlock made it; nothing was written (use another lock name, or remove that key)')
      end
      if i ~= 8 then seen = seen + 1 end
    end
  end
end

-- the server clock in ms (and in microseconds: now_us), read once per call and only where needed
local function tick()
  if not now then
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
end

-- a counter value as Redis stores it: fences are server times in microseconds (16 digits), which Lua's own
-- number-to-string conversion would print as 1.7e+15
local function int(x)
  return string.format('%d', x)
end

-- the next fence: the counter plus one, and on a node (`clocked`) never below the server clock in
-- microseconds. A node's counter that was lost (flush, eviction, restart without persistence) or went back (a
-- failover to a replica that had not received it, a restart from an older snapshot) starts again at the
-- current time, above every fence handed out before, as long as the clock of the server that counts now is
-- past the time of the last fence counted before the fault (docs/models/fence_counter.pml). One script runs
-- at a time and takes more than a microsecond, so counting never outruns the clock. A Redlock master counts
-- one up (the pushes of a hand-over from several masters must carry the same fence); its clock comes in
-- through the client's seeding rule instead (docs/models/redlock_fence.pml, CLOCK).
local function bump(clocked)
  local n = redis.call('HINCRBY', KEYS[8], 'n', 1)
  if clocked then
    tick()
    if n < now_us then
      n = now_us
      redis.call('HSET', KEYS[8], 'n', int(n))
    end
  end
  return n
end

-- drop expired shared holders and waiters whose entry was not refreshed in time
local function purge()
  tick()
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
  local dead = redis.call('ZRANGEBYSCORE', KEYS[6], '-inf', now)
  for _, m in ipairs(dead) do
    redis.call('ZREM', KEYS[5], m)
    redis.call('HDEL', KEYS[9], m)
    redis.call('HDEL', KEYS[10], m)
  end
  if #dead > 0 then redis.call('ZREMRANGEBYSCORE', KEYS[6], '-inf', now) end
end

-- forget a waiter's queue entry (order, deadline, hand-over record, reply channel)
local function dequeue(member)
  redis.call('ZREM', KEYS[5], member)
  redis.call('ZREM', KEYS[6], member)
  redis.call('HDEL', KEYS[9], member)
  redis.call('HDEL', KEYS[10], member)
end

-- where a waiter's wake-up goes: its store's reply channel if its try gave one, else the name's channel
local function reply_to(member)
  return redis.call('HGET', KEYS[10], member) or channel
end

-- keep a key at least until `until_ms` (never shorten: other members may live longer)
local function keep_until(key, until_ms)
  tick()
  local p = redis.call('PTTL', key)
  if p == -1 or (p >= 0 and p < until_ms - now) then redis.call('PEXPIRE', key, until_ms - now) end
end

-- wake the first waiter (one wake-up per release, to its store only: no herd)
local function wake_head()
  local head = redis.call('ZRANGE', KEYS[5], 0, 0)[1]
  if head then
    local bar = string.find(head, '|', 1, true)
    redis.call('PUBLISH', reply_to(head), string.sub(head, bar + 1))
  end
end

-- is this details record (or owner string) an election candidate's? (a 0x1F byte between owner and value)
local function elected(record)
  return record ~= nil and record ~= false and string.find(record, '\\31', 1, true) ~= nil
end

-- an election's leader or value may have changed: wake its observers (no waiter takes this for its turn)
local function notice()
  redis.call('PUBLISH', channel, '"""
    + NOTICE
    + """')
end

local function shared_set(mode)
  if mode == 'read' then return KEYS[2] end
  return KEYS[3]
end

local function fence_of(token)
  local inf = redis.call('HGET', KEYS[4], token)
  if not inf then return -1 end
  local a = string.find(inf, '|', 1, true)
  local b = string.find(inf, '|', a + 1, true)
  return tonumber(string.sub(inf, a + 1, b - 1))
end

-- 0.1.0 kept a per-name counter {N}:fence: fold it into the counter (never hand out a fence below it), drop it
local function absorb()
  local old = redis.call('GET', KEYS[7])
  if old then
    if tonumber(old) > tonumber(redis.call('HGET', KEYS[8], 'n') or '0') then
      redis.call('HSET', KEYS[8], 'n', old)
    end
    redis.call('DEL', KEYS[7])
  end
end

-- the permits a semaphore holding takes: the mode part of its details is 'semaphore' (1) or 'semaphore:<n>'
local function weight(token)
  local inf = redis.call('HGET', KEYS[4], token)
  return tonumber(inf and string.match(inf, '^semaphore:(%d+)|') or '1')
end

-- the permits taken of the semaphore: the sum over its live holders (purge ran)
local function used_permits()
  local used = 0
  for _, tk in ipairs(redis.call('ZRANGE', KEYS[3], 0, -1)) do used = used + weight(tk) end
  return used
end

-- a semaphore's terms ({N}:sem) go with its last holder and waiter: once neither is left (purge ran), delete them
local function tidy_terms()
  if redis.call('ZCARD', KEYS[3]) == 0 and redis.call('EXISTS', KEYS[5]) == 0 then redis.call('DEL', KEYS[11]) end
end

-- is `token` a live holder in `mode`?
local function holds(token, mode)
  if mode == 'lock' or mode == 'write' then return redis.call('GET', KEYS[1]) == token end
  tick()
  local s = redis.call('ZSCORE', shared_set(mode), token)
  return s ~= false and tonumber(s) > now
end
"""
)
