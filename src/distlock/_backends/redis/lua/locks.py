"""The scripts of a holding's life on one Redis server, a Redis Cluster or a Redlock master: ``ACQUIRE`` (with its
queue entry and the grant rule of ``distlock._core.arbiter``), ``RELEASE`` (with the direct hand-over to the first
waiter), ``ABANDON``, ``RENEW``, ``HOLDS``, Redlock's ``FENCE_FLOOR`` (the seeding of a master's fence
counter) and a semaphore's ``RESIZE`` (``set_permits``). Each starts with the shared ``PRELUDE``; its header names its ARGV and its reply. No I/O here.
"""

from __future__ import annotations

from .prelude import PRELUDE

ACQUIRE = (
    PRELUDE
    + """
-- ARGV: 1 channel, 2 token, 3 mode, 4 ttl ms, 5 permits: a semaphore claim's '<want>:<declared>' (the permits it
--         takes; the capacity its user declared, '' = none: follow the stored one), 6 fair (0/1), 7 owner (the claim's record: an
--         election candidate's carries its value, and its grant wakes the name's observers),
--       8 waiter entry ttl ms (0: do not queue on failure),
--       9 marker: on a node the epoch this client saw ('' = none yet); on a Redlock master '@' + the run id
--         of the server, which the client read on the very connection this request goes out on,
--      10 hand-over stamp: '' = none; else (an exclusive claim that takes a direct hand-over) the client's
--         send time of this very request, kept with its queue entry and echoed by the release that grants it
--      11 (optional) reply channel: '' = none; else the channel the waiter's store reads its own wake-ups on
--         (its subscription confirmed before this request was sent), kept with its queue entry
--      12 (optional) a read claim's companion: the token of its owner's write holding (a downgrade). While
--         that token holds the name, the read is granted at once whoever waits: the write excludes everyone
--         else, and the read it leaves keeps writers out after the write's release (they need no reader)
-- Returns {1, fence, mark, counter} when held (a retry after a lost reply, or the confirmation of a
--         hand-over, gets the same fence back, and an exclusive lease runs `ttl` from this request),
--         {0, ms until the earliest holder's lease ends (-1 if unknown), mark, counter} otherwise,
--         {2, declared, mark, counter, capacity} when a semaphore claim does not fit the terms of the semaphore
--         in use (-1, -1: none in use and the claim declared none): nothing written, its queue entry dropped
--         (the client raises the ConfigError of distlock._core.arbiter.terms);
-- mark = the node's epoch, or on a Redlock master '1' (seeded: its fence counts) / '0' (not seeded:
-- fence -1, the client re-seeds it; its counter part is then at least the server clock in microseconds).
-- A node whose counter is gone starts it again from the clock with a new epoch (bump), which tells the
-- client that saw the old epoch that its counter was lost.
local token, mode = ARGV[2], ARGV[3]
local ttl, fair, owner, qttl = tonumber(ARGV[4]), ARGV[6] == '1', ARGV[7], tonumber(ARGV[8])
local want, declared = string.match(ARGV[5], '^(%d+):(%d*)$')
want, declared = tonumber(want or '1'), tonumber(declared or '')
local marker, stamp, reply, companion = ARGV[9], ARGV[10], ARGV[11] or '', ARGV[12] or ''
local exclusive = (mode == 'lock' or mode == 'write')
local member = mode .. '|' .. token
local mark = redis.call('HGET', KEYS[8], 'e')
local seeded = true
local redlock = string.sub(marker, 1, 1) == '@'
if redlock then
  seeded = (mark ~= false and marker ~= '@' and mark == string.sub(marker, 2))
  if seeded then mark = '1' else mark = '0' end
elseif not mark then
  mark = token
  redis.call('HSET', KEYS[8], 'e', mark)
end
local function next_fence()
  if seeded then return bump(not redlock) end
  return -1
end
local function counter()
  local n = tonumber(redis.call('HGET', KEYS[8], 'n') or '0')
  if not seeded then
    tick()
    if now_us > n then n = now_us end
  end
  return n
end
-- fast path: the name has no key at all (nobody holds or waits for it, no details left, no 0.1.0 counter to
-- fold in: the prelude counted them). Any stale entry is dropped by the full path below. On a node the fence
-- reads TIME once; nothing else here needs the clock.
if exclusive and present == 0 then
  local fence = next_fence()
  redis.call('SET', KEYS[1], token, 'PX', ttl)
  redis.call('HSET', KEYS[4], token, mode .. '|' .. int(fence) .. '|' .. owner)
  redis.call('PEXPIRE', KEYS[4], ttl)
  if elected(owner) then notice() end
  if seeded then return {1, fence, mark, fence} end
  return {1, fence, mark, counter()}
end
absorb()
tick()
purge()
-- this try reached the server after its client gave up on it and cleaned up (ABANDON's cut mark): it grants
-- and queues nothing
if redis.call('ZSCORE', KEYS[6], 'gone|' .. token) then return {0, -1, mark, counter()} end
if holds(token, mode) then
  if exclusive then
    -- the try that finds a hand-over (or its own lost grant) confirms it: the lease runs from this request,
    -- whose send the client counts from (a grant's own lease may end sooner: at the queue deadline)
    redis.call('PEXPIRE', KEYS[1], ttl)
    keep_until(KEYS[4], now + ttl)
  end
  return {1, fence_of(token), mark, counter()}
end
local holder = redis.call('GET', KEYS[1])
local nread = redis.call('ZCARD', KEYS[2])
local nsem = redis.call('ZCARD', KEYS[3])
local myseq = redis.call('ZSCORE', KEYS[5], member)
local ahead
if myseq then
  ahead = redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', '(' .. myseq)
else
  ahead = redis.call('ZRANGE', KEYS[5], 0, -1)
end
-- a semaphore's terms (declared, capacity: distlock._core.arbiter.terms): the stored ones while it is in use
-- (a live holder or waiter of the name); else the claim's own, written with its grant or queue entry. A record
-- found with nobody live is a crash's leftover
local cap, terms = 0, nil
if mode == 'semaphore' then
  local stored = redis.call('HMGET', KEYS[11], 'd', 'c')
  local d, c = tonumber(stored[1]), tonumber(stored[2])
  if d and c and not (holder or nread > 0 or nsem > 0 or redis.call('EXISTS', KEYS[5]) == 1) then
    redis.call('DEL', KEYS[11])
    d, c = nil, nil
  end
  if not (d and c) then
    d, c, terms = declared, declared, declared
  end
  if not d or (declared and declared ~= d) or want > c then
    if myseq then
      -- out of the queue, and its wake-up passed on: the one behind it may fit
      dequeue(member)
      tidy_terms()
      wake_head()
    end
    return {2, d or -1, mark, counter(), c or -1}
  end
  cap = c
end
local ok = (not holder)
if exclusive then
  ok = ok and nread == 0 and nsem == 0 and not (fair and #ahead > 0)
elseif mode == 'semaphore' then
  -- used + want <= capacity, and no semaphore claim that could fit is waiting ahead: if fair, none whose wants
  -- (with ours) do not fit beside the holders; else none that wants more than one permit (it is not starved)
  local room = cap - used_permits() - want
  ok = ok and nread == 0 and room >= 0
  for _, m in ipairs(ahead) do
    if not ok then break end
    if string.sub(m, 1, 10) == 'semaphore|' then
      local w = tonumber(redis.call('HGET', KEYS[9], m) or '1')
      if w <= cap then
        if fair then
          room = room - w
          ok = room >= 0
        else
          ok = w <= 1
        end
      end
    end
  end
elseif companion ~= '' and holder == companion then
  ok = true
else
  ok = ok and nsem == 0
  if ok and fair then
    ok = #ahead == 0
  elseif ok then
    for _, m in ipairs(ahead) do
      if string.sub(m, 1, 6) == 'write|' then ok = false break end
    end
  end
end
if ok then
  local fence = next_fence()
  local expires = now + ttl
  if exclusive then
    redis.call('SET', KEYS[1], token, 'PX', ttl)
  else
    redis.call('ZADD', shared_set(mode), expires, token)
    keep_until(shared_set(mode), expires)
  end
  -- forget details of holders that died without releasing
  if redis.call('HLEN', KEYS[4]) > nread + nsem + ((holder and 1) or 0) then
    for _, tk in ipairs(redis.call('HKEYS', KEYS[4])) do
      -- a release request '<token>!r' goes with its holder's own record
      local of = tk
      if string.sub(tk, -2) == '!r' then of = string.sub(tk, 1, -3) end
      if of ~= holder and not redis.call('ZSCORE', KEYS[2], of) and not redis.call('ZSCORE', KEYS[3], of) then
        redis.call('HDEL', KEYS[4], tk)
      end
    end
  end
  local kind = mode
  if mode == 'semaphore' then
    if want > 1 then kind = 'semaphore:' .. want end
    if terms then redis.call('HSET', KEYS[11], 'd', terms, 'c', terms) end
    keep_until(KEYS[11], expires)
  end
  redis.call('HSET', KEYS[4], token, kind .. '|' .. int(fence) .. '|' .. owner)
  keep_until(KEYS[4], expires)
  if myseq then dequeue(member) end
  -- a shared grant may let the next waiter in too: pass the wake-up on
  if not exclusive then wake_head() end
  if elected(owner) then notice() end
  return {1, fence, mark, counter()}
end
if qttl > 0 then
  if not myseq then
    local last = redis.call('ZRANGE', KEYS[5], -1, -1, 'WITHSCORES')
    local seq = 1
    if last[2] then seq = tonumber(last[2]) + 1 end
    redis.call('ZADD', KEYS[5], seq, member)
  end
  redis.call('ZADD', KEYS[6], now + qttl, member)
  keep_until(KEYS[5], now + qttl)
  keep_until(KEYS[6], now + qttl)
  if exclusive and stamp ~= '' then
    redis.call('HSET', KEYS[9], member, stamp .. '|' .. ttl .. '|' .. marker .. '|' .. owner)
    keep_until(KEYS[9], now + qttl)
  elseif mode == 'semaphore' then
    if want > 1 then
      redis.call('HSET', KEYS[9], member, want)
      keep_until(KEYS[9], now + qttl)
    end
    if terms then redis.call('HSET', KEYS[11], 'd', terms, 'c', terms) end
    keep_until(KEYS[11], now + qttl)
  end
  if reply ~= '' then
    redis.call('HSET', KEYS[10], member, reply)
    keep_until(KEYS[10], now + qttl)
  else
    redis.call('HDEL', KEYS[10], member)
  end
end
local retry = -1
if holder then
  local p = redis.call('PTTL', KEYS[1])
  if p >= 0 then retry = p end
end
for _, set in ipairs({KEYS[2], KEYS[3]}) do
  local first = redis.call('ZRANGE', set, 0, 0, 'WITHSCORES')
  if first[2] then
    local d = tonumber(first[2]) - now
    if retry < 0 or d < retry then retry = d end
  end
end
return {0, retry, mark, counter()}
"""
)

RELEASE = (
    PRELUDE
    + """
-- ARGV: 1 channel, 2 token, 3 mode, 4 (Redlock; optional) '@' + the server's run id as the releaser read it
--       on the connection this request goes out on, 5 (optional) '0' when the claim is no election
--       candidate's (its details record needs no read: nobody observes it).  Compare-and-delete: returns 1 if
--       the token held a live lease; the token's own queue entry goes too (a Redlock holder may still be
--       queued on a master that did not grant it).
-- Direct hand-over: when an exclusive holding ends and the first live waiter is an exclusive one with a
-- hand-over record, the name goes to that waiter in this step: the key holds its token with a lease capped
-- at its queue deadline (a waiter that died in the queue loses the grant when its entry would have run out),
-- its fence is counted, and the push "token|fence|stamp" tells it; it holds from then, counting its lease
-- from the echoed stamp (the send of the try that queued it: before this grant). Otherwise the first waiter
-- is woken to try. docs/models/redis_handover.pml checks the rule. On a Redlock master the hand-over also
-- needs the counter seeded under the run id that both the waiter's try and this release were sent under
-- (a master restarted since counts toward no fence: docs/models/redlock_fence.pml, HANDOVER).
local token, mode, runwant = ARGV[2], ARGV[3], ARGV[4] or ''
-- each call below costs about 1 us of the server's time: the hot path (nobody waits) makes four
local record = nil
if ARGV[5] ~= '0' then record = redis.call('HGET', KEYS[4], token) end
local ok = 0
local exclusive = (mode == 'lock' or mode == 'write')
if exclusive then
  if redis.call('GET', KEYS[1]) == token then
    redis.call('DEL', KEYS[1])
    ok = 1
  end
else
  purge()
  ok = redis.call('ZREM', shared_set(mode), token)
end
redis.call('HDEL', KEYS[4], token, token .. '!r')
local queued = redis.call('EXISTS', KEYS[5]) == 1
if queued and redis.call('ZSCORE', KEYS[5], mode .. '|' .. token) then
  dequeue(mode .. '|' .. token)
  queued = redis.call('EXISTS', KEYS[5]) == 1
end
local function hand_over()
  local head = redis.call('ZRANGE', KEYS[5], 0, 0)[1]
  if not head or redis.call('ZCARD', KEYS[2]) > 0 or redis.call('ZCARD', KEYS[3]) > 0 then return false end
  local bar = string.find(head, '|', 1, true)
  local hmode = string.sub(head, 1, bar - 1)
  if hmode ~= 'lock' and hmode ~= 'write' then return false end
  local rec = redis.call('HGET', KEYS[9], head)
  local deadline = redis.call('ZSCORE', KEYS[6], head)
  if not rec or not deadline then return false end
  local a = string.find(rec, '|', 1, true)
  local b = string.find(rec, '|', a + 1, true)
  local c = string.find(rec, '|', b + 1, true)
  local hstamp, httl, hwant, howner = string.sub(rec, 1, a - 1), tonumber(string.sub(rec, a + 1, b - 1)),
    string.sub(rec, b + 1, c - 1), string.sub(rec, c + 1)
  -- the waiter's store saw this counter's marker (or none yet: then any marker there is its first);
  -- a counter that is gone or replaced is left to the waiter's own try (it learns the new epoch there)
  local mark = redis.call('HGET', KEYS[8], 'e')
  if string.sub(hwant, 1, 1) == '@' then
    if hwant == '@' or hwant ~= runwant or mark ~= string.sub(hwant, 2) then return false end
  elseif not mark or (hwant ~= '' and hwant ~= mark) then
    return false
  end
  local px = math.min(httl, tonumber(deadline) - now)
  if px <= 0 then return false end
  local htoken = string.sub(head, bar + 1)
  absorb()
  local fence = int(bump(string.sub(hwant, 1, 1) ~= '@'))
  local to = reply_to(head)
  redis.call('SET', KEYS[1], htoken, 'PX', px)
  redis.call('HSET', KEYS[4], htoken, hmode .. '|' .. fence .. '|' .. howner)
  keep_until(KEYS[4], now + px)
  dequeue(head)
  redis.call('PUBLISH', to, htoken .. '|' .. fence .. '|' .. hstamp)
  if elected(howner) then notice() end
  return true
end
if ok == 1 and queued then
  purge()
  if not (exclusive and hand_over()) then wake_head() end
end
if mode == 'semaphore' then tidy_terms() end
if ok == 1 and elected(record) then notice() end
return ok
"""
)

ABANDON = (
    PRELUDE
    + """
-- ARGV: 1 channel, 2 token, 3 mode, 4 (optional) cut mark ms.  Remove every trace of a failed or cancelled
-- acquire: the queue entry, and a holding whose reply was lost (F10 in docs/safety.md). Passes a wake-up on if
-- the name is free. A cut mark (> 0: a try of the claim was let go of mid-call, and may reach the server after
-- this) keeps 'gone|<token>' in the waiter leases for that long, so that such a try grants nothing.
local token, mode = ARGV[2], ARGV[3]
local member = mode .. '|' .. token
local record = redis.call('HGET', KEYS[4], token)
purge()
local cut = tonumber(ARGV[4] or '0')
if cut > 0 then
  redis.call('ZADD', KEYS[6], now + cut, 'gone|' .. token)
  keep_until(KEYS[6], now + cut)
end
local gone = redis.call('ZREM', KEYS[5], member)
redis.call('ZREM', KEYS[6], member)
redis.call('HDEL', KEYS[9], member)
redis.call('HDEL', KEYS[10], member)
if mode == 'lock' or mode == 'write' then
  if redis.call('GET', KEYS[1]) == token then
    redis.call('DEL', KEYS[1])
    gone = gone + 1
    if elected(record) then notice() end
  end
else
  gone = gone + redis.call('ZREM', shared_set(mode), token)
end
redis.call('HDEL', KEYS[4], token, token .. '!r')
if mode == 'semaphore' then tidy_terms() end
absorb()
if gone > 0 and not redis.call('GET', KEYS[1]) then wake_head() end
return gone
"""
)

RENEW = (
    PRELUDE
    + """
-- ARGV: 1 channel, 2 token, 3 mode, 4 ttl ms.  Extends a LIVE lease only (one that ran out may belong
-- to someone else by now). Returns 1 if extended, or, extended, the release request made to this holder
-- ('revoke|-1|<id>|<reason>': REQUEST in admin.py) if there is one.
local token, mode, ttl = ARGV[2], ARGV[3], tonumber(ARGV[4])
tick()
if not holds(token, mode) then return 0 end
if mode == 'lock' or mode == 'write' then
  redis.call('PEXPIRE', KEYS[1], ttl)
else
  redis.call('ZADD', shared_set(mode), 'XX', now + ttl, token)
  keep_until(shared_set(mode), now + ttl)
  if mode == 'semaphore' then keep_until(KEYS[11], now + ttl) end
end
keep_until(KEYS[4], now + ttl)
local asked = redis.call('HGET', KEYS[4], token .. '!r')
if asked then return asked end
return 1
"""
)

RESIZE = (
    PRELUDE
    + """
-- ARGV: 1 channel, 2 capacity.  set_permits: make `capacity` the semaphore's capacity in force if it is in use
-- (a live holder or waiter: its terms live as long as those), its declared one kept, and wake the first waiter
-- (a larger capacity may let it in; its grant passes the wake-up on). Returns 1; 0 for a free name, with
-- nothing written (a crash's leftover terms deleted). Holders above a smaller capacity keep their permits.
purge()
if not (redis.call('GET', KEYS[1]) or redis.call('ZCARD', KEYS[2]) > 0 or redis.call('ZCARD', KEYS[3]) > 0
    or redis.call('EXISTS', KEYS[5]) == 1) then
  redis.call('DEL', KEYS[11])
  return 0
end
if redis.call('EXISTS', KEYS[11]) == 0 then
  -- in use without terms (holders that wrote none): these become its terms, kept as long as they are
  redis.call('HSET', KEYS[11], 'd', ARGV[2])
  local last = now
  for _, set in ipairs({KEYS[3], KEYS[6]}) do
    local top = redis.call('ZRANGE', set, -1, -1, 'WITHSCORES')
    if top[2] and tonumber(top[2]) > last then last = tonumber(top[2]) end
  end
  local p = redis.call('PTTL', KEYS[1])
  if p > 0 and now + p > last then last = now + p end
  redis.call('PEXPIRE', KEYS[11], math.max(1, last - now))
end
redis.call('HSET', KEYS[11], 'c', ARGV[2])
wake_head()
return 1
"""
)

HOLDS = (
    PRELUDE
    + """
-- ARGV: 1 channel, 2 token, 3 mode.  Returns 1 if the token is a live holder.
if holds(ARGV[2], ARGV[3]) then return 1 end
return 0
"""
)

FENCE_FLOOR = (
    PRELUDE
    + """
-- ARGV: 1 channel, 2 token, 3 floor, 4 mode, 5 fence, 6 run id.  Redlock: raise this master's counter to
-- at least `floor` and mark it seeded under this run (the client sends a floor no lower than the counters
-- of a majority of seeded masters, so every later majority, which shares a master with this write-back,
-- counts above it); record `fence` as the holder's fence. Returns 1 if the token holds the name in `mode`.
local token, floor, mode, fence, run = ARGV[2], tonumber(ARGV[3]), ARGV[4], ARGV[5], ARGV[6]
absorb()
if tonumber(redis.call('HGET', KEYS[8], 'n') or '0') < floor then redis.call('HSET', KEYS[8], 'n', ARGV[3]) end
if run ~= '' then redis.call('HSET', KEYS[8], 'e', run) end
local inf = redis.call('HGET', KEYS[4], token)
if inf then
  local a = string.find(inf, '|', 1, true)
  local b = string.find(inf, '|', a + 1, true)
  redis.call('HSET', KEYS[4], token, string.sub(inf, 1, a) .. fence .. string.sub(inf, b))
end
if holds(token, mode) then return 1 end
return 0
"""
)
