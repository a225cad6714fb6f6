-- fencelock on one Redis node: every operation of the store, one call of this script each,
-- so that each is atomic on the node and judged by the node's clock (TIME).
--
-- KEYS[1] is the prefix of every key (keys are built here from it: the store needs a
-- standalone node, not Redis Cluster). ARGV[1] names the operation; the rest are its
-- arguments. Every reply starts with the node's time in milliseconds.
--
-- Keys under the prefix P (`US` is the unit separator, byte 31, which no name, owner or
-- principal may contain):
--   P lock: NAME            a lock's lease: a record (below), with PX as a backstop
--   P holds:S: NAME         a semaphore's permits: a hash, owner name -> record
--   P holds:R: NAME         a read-write lock's holds: a hash, owner name -> record
--   P intents: NAME         writers waiting for a read-write lock: owner name -> "expires US principal"
--   P token:L: NAME, P token:S: NAME, P token:R: NAME
--                           the last token issued for the name; never expires
--   P index:L, P index:S, P index:R
--                           names with a lease, permit or hold (score 0: ordered by bytes)
--   P due                   KIND US NAME, scored by when something of it ends (purge)
--   P call: CALL            under Redlock, what one try of a grant changed on this node: for
--                           each lease it extended or hold it replaced, the record before
--                           ('b' US KIND US NAME) and the one it wrote ('w' US KIND US NAME);
--                           and 'cancelled' once the try was undone
--   P node                  when this node began to keep Redlock's state (see `mark`)
--   P gone:KIND: NAME       under Redlock, the tokens of leases and holds of the name that a
--                           release, a force-release or an undo ended here, until they would
--                           have ended anyway (see `bury`)
--   P released              the channel where freed names are announced: KIND US NAME
--
-- A record is "token US acquired_at US expires_at US hold_until US lock_delay US claim US
-- limit US principal US owner US until US cap US slot US meta": times in milliseconds since
-- the epoch (hold_until and cap 0: no cap), lock_delay in milliseconds, claim one of lock,
-- permit, read, write, limit 0 but for permits, principal empty for none, slot 0 but for a
-- permit granted under Redlock, meta the holder's metadata as compact JSON (empty for none;
-- JSON escapes every control character, so it holds no US). Records written before leases
-- kept metadata end at slot: they have none.
--
-- `until` and `cap` are the end and the cap by this node's clock: they decide whether the
-- lease is live here. `acquired_at`, `expires_at` and `hold_until` are what the store
-- reports, the same on every node: on one node, its own times (then `until` = `expires_at`);
-- under Redlock, the times the fencelock server measured with its own clock, from when it
-- sent the call (ARGV's SHOWN_FROM), `expires_at` less its allowance for drift: SHOWN_PER_MILLE
-- thousandths of the time from the call to the end, and SHOWN_FIXED milliseconds.
--
-- Numbers are written with string.format('%d') (a C long: exact for every integer a
-- double holds): Lua's own conversion keeps 14 digits, and tokens have 16. '%.0f' writes
-- the same but costs about twice as much (glibc's exact float printing), and an acquire
-- writes a dozen numbers; it is kept for a number with a fraction, which none should have.

local P = KEYS[1]
local US = '\31'
local GRACE = 60000 -- how long a key outlives its end, so that a purge sees it first

local t = redis.call('TIME')
local NOW_US = tonumber(t[1]) * 1000000 + tonumber(t[2])
local NOW = math.floor(NOW_US / 1000)

local function num(x)
  if x % 1 == 0 then return string.format('%d', x) end
  return string.format('%.0f', x)
end

local function split(s)
  local parts, from = {}, 1
  while true do
    local at = string.find(s, US, from, true)
    if not at then
      parts[#parts + 1] = string.sub(s, from)
      return parts
    end
    parts[#parts + 1] = string.sub(s, from, at - 1)
    from = at + 1
  end
end

local function decode(s)
  local f = split(s)
  return {
    token = tonumber(f[1]), acquired = tonumber(f[2]), expires = tonumber(f[3]),
    hold_until = tonumber(f[4]), delay = tonumber(f[5]), claim = f[6],
    limit = tonumber(f[7]), principal = f[8], owner = f[9], ['until'] = tonumber(f[10]),
    cap = tonumber(f[11]), slot = tonumber(f[12]), meta = f[13] or '', raw = s,
  }
end

local function encode(r)
  r.raw = table.concat({ num(r.token), num(r.acquired), num(r.expires), num(r.hold_until),
    num(r.delay), r.claim, num(r.limit), r.principal, r.owner, num(r['until']), num(r.cap),
    num(r.slot or 0), r.meta or '' }, US)
  return r.raw
end

local function cut(expires, hold_until)
  if hold_until > 0 and hold_until < expires then return hold_until end
  return expires
end

-- What the store reports of a call whose SHOWN_FROM, SHOWN_PER_MILLE and SHOWN_FIXED are in
-- `a` from `i` on (SHOWN_FROM 0 on one node: this node's time, no allowance): when it was
-- made, and when a lease of `ms` from then, cut at `hold_until`, ends.
local function shown(a, i)
  local from, per_mille, fixed = tonumber(a[i]), tonumber(a[i + 1]), tonumber(a[i + 2])
  if from == 0 then
    return NOW, function(ms, hold_until) return cut(NOW + ms, hold_until) end
  end
  return from, function(ms, hold_until)
    local ends = cut(from + ms, hold_until)
    return ends - math.floor((ends - from) * per_mille / 1000) - fixed
  end
end

local function lock_key(name) return P .. 'lock:' .. name end
local function gone_key(kind, name) return P .. 'gone:' .. kind .. ':' .. name end
local function holds_key(kind, name) return P .. 'holds:' .. kind .. ':' .. name end
local function intents_key(name) return P .. 'intents:' .. name end
local function token_key(kind, name) return P .. 'token:' .. kind .. ':' .. name end
local function index_key(kind) return P .. 'index:' .. kind end
local DUE = P .. 'due'

local function announce(kind, name)
  redis.call('PUBLISH', P .. 'released', kind .. US .. name)
end

-- A try of a Redlock grant, CALL ('' on one node), sent at FROM by the server's clock for a
-- lease of TTL: whether it must change nothing here, and why. A try that was undone before
-- it arrived (this node hung, or the undo overtook it) is 'cancelled'; one that arrives so
-- late that its lease could be over (and its undo's record gone) is 'late'. So a grant
-- that a server gave up on never takes effect afterwards, however long a node held it back.
local function call_key(call) return P .. 'call:' .. call end

local function barred(call, from, ttl)
  if call == '' then return nil end
  -- A node that lost its data votes for nothing until it is brought up to date (`adopt`,
  -- then `mark`): its empty state would grant what the others hold.
  if redis.call('EXISTS', P .. 'node') == 0 then return 'unmarked' end
  if redis.call('HEXISTS', call_key(call), 'cancelled') == 1 then return 'cancelled' end
  if NOW > from + ttl + GRACE / 2 then return 'late' end
  return nil
end

-- Keeps what try CALL changed of the record FIELD (KIND US NAME): BEFORE, and what it wrote,
-- so that its undo puts back exactly what was there. Nothing on one node, which never undoes.
local function remember(call, field, before, written, ttl)
  if call == '' then return end
  local key = call_key(call)
  redis.call('HSET', key, 'b' .. US .. field, before, 'w' .. US .. field, written)
  redis.call('PEXPIRE', key, num(ttl + GRACE))
end

-- The token of a new grant: the proposal if above the node's counter (Redlock), else none;
-- without a proposal (one node), one above the counter and at least the time in
-- microseconds, so that a node restarted without its data does not issue old tokens again.
local function next_token(kind, name, proposal)
  local key = token_key(kind, name)
  local last = tonumber(redis.call('GET', key) or '0')
  local token
  if proposal > 0 then
    if proposal <= last then return nil, last end
    token = proposal
  else
    token = math.max(last + 1, NOW_US)
  end
  redis.call('SET', key, num(token))
  return token
end

-- Under Redlock (a marked node), remembers that the lease or hold R of NAME was ended here —
-- released, force-released or undone — until it would have ended anyway. A node brought up
-- to date from the others (`adopt`) takes this in too, so that a copy the release missed on
-- one node (it was cut off then) never comes back to life as a majority.
local function bury(kind, name, r)
  if redis.call('EXISTS', P .. 'node') == 0 then return end
  local key = gone_key(kind, name)
  redis.call('HSET', key, num(r.token), '1')
  local left = r['until'] - NOW + GRACE
  if redis.call('PTTL', key) < left then redis.call('PEXPIRE', key, num(left)) end
end

-- Locks ----------------------------------------------------------------------------------

local function closed_until(r) return r['until'] + r.delay end

local function write_lock(name, r)
  local ends = closed_until(r)
  redis.call('SET', lock_key(name), encode(r), 'PX', num(ends - NOW + GRACE))
  redis.call('ZADD', index_key('L'), 0, name)
  redis.call('ZADD', DUE, num(ends), 'L' .. US .. name)
end

local function forget_lock(name)
  redis.call('DEL', lock_key(name))
  redis.call('ZREM', index_key('L'), name)
  redis.call('ZREM', DUE, 'L' .. US .. name)
end

local function read_lock(name)
  local s = redis.call('GET', lock_key(name))
  if s then return decode(s) end
  return nil
end

local function live_lock(name)
  local r = read_lock(name)
  if r and NOW < r['until'] then return r end
  return nil
end

-- acquire OWNER PRINCIPAL TTL MAX_HOLD LOCK_DELAY CALL SHOWN_FROM SHOWN_PER_MILLE SHOWN_FIXED META
-- (NAME PROPOSAL)...: every lock or none, each new lease with its PROPOSAL as its token
-- (Redlock) or the next token (PROPOSAL 0, one node).
-- META is the metadata sent ('' none): a grant's, and an extension's if not ''.
-- Reply: NOW, then 'unmarked', 'cancelled' or 'late' alone (see `barred`: nothing was
-- written), or per
-- name STATUS RECORD PREVIOUS: granted (the new lease, the expired one it replaced or ''),
-- extended (the lease, the lease before), held (the holder's lease, ''), delayed (the
-- expired lease, ''), stale (the node's last token, ''), or, when another name was refused,
-- free (the expired lease or '', ''). Nothing is written unless every name is granted or
-- extended.
local function acquire(a)
  local owner, principal = a[2], a[3]
  local ttl, max_hold, delay, call = tonumber(a[4]), tonumber(a[5]), tonumber(a[6]), a[7]
  local at, ends = shown(a, 8)
  local meta = a[11]
  local bar = barred(call, at, ttl)
  if bar then return { NOW, bar } end
  local judged, refused = {}, false
  for i = 12, #a, 2 do
    local name, proposal = a[i], tonumber(a[i + 1])
    local r = read_lock(name)
    if r and NOW < r['until'] and r.owner == owner and r.principal == principal then
      judged[#judged + 1] = { name, 'extended', r, proposal }
    elseif r and NOW < r['until'] then
      judged[#judged + 1] = { name, 'held', r, proposal }
      refused = true
    elseif r and NOW < closed_until(r) then
      judged[#judged + 1] = { name, 'delayed', r, proposal }
      refused = true
    else
      judged[#judged + 1] = { name, 'granted', r, proposal }
    end
  end
  if not refused then
    for _, j in ipairs(judged) do
      if j[2] == 'granted' and j[4] > 0 then
        local last = tonumber(redis.call('GET', token_key('L', j[1])) or '0')
        if j[4] <= last then
          j[2], j[3], refused = 'stale', { raw = num(last) }, true
        end
      end
    end
  end
  local reply = { NOW }
  for _, j in ipairs(judged) do
    local name, status, r, proposal = j[1], j[2], j[3], j[4]
    local previous = ''
    if not refused and status == 'granted' then
      if r then previous = r.raw end
      local hold_until, cap = 0, 0
      if max_hold > 0 then hold_until, cap = at + max_hold, NOW + max_hold end
      r = { token = next_token('L', name, proposal), acquired = at,
        expires = ends(ttl, hold_until), hold_until = hold_until, delay = delay,
        claim = 'lock', limit = 0, principal = principal, owner = owner,
        ['until'] = cut(NOW + ttl, cap), cap = cap, meta = meta }
      write_lock(name, r)
    elseif not refused and status == 'extended' then
      local before = r['until']
      previous = r.raw
      r.acquired, r.expires, r['until'] = at, ends(ttl, r.hold_until), cut(NOW + ttl, r.cap)
      if meta ~= '' then r.meta = meta end
      write_lock(name, r)
      remember(call, 'L' .. US .. name, previous, r.raw, ttl)
      if r['until'] < before then announce('L', name) end
    end
    if refused and status == 'granted' then status = 'free' end
    reply[#reply + 1] = status
    reply[#reply + 1] = r and r.raw or ''
    reply[#reply + 1] = previous
  end
  return reply
end

-- get NAME. Reply: NOW, the live lease or ''.
local function get(a)
  local r = live_lock(a[2])
  return { NOW, r and r.raw or '' }
end

-- The SPEC's order for release and renew: absent, then owner, then token.
local function check(r, owner, principal, token)
  if not r then return 'notfound' end
  if r.owner ~= owner or r.principal ~= principal then return 'forbidden' end
  if token and r.token ~= token then return 'conflict' end
  return nil
end

-- release NAME OWNER PRINCIPAL TOKEN ('': none given). Reply: NOW, STATUS, the lease released or ''.
local function release(a)
  local name = a[2]
  local r = live_lock(name)
  local refusal = check(r, a[3], a[4], tonumber(a[5]))
  if refusal then return { NOW, refusal, '' } end
  forget_lock(name)
  bury('L', name, r)
  announce('L', name)
  return { NOW, 'released', r.raw }
end

-- renew NAME OWNER PRINCIPAL TTL TOKEN SHOWN_FROM SHOWN_PER_MILLE SHOWN_FIXED META ('': keep
-- the lease's). Reply: NOW, STATUS, the renewed lease or ''.
local function renew(a)
  local name, ttl = a[2], tonumber(a[5])
  local r = live_lock(name)
  local refusal = check(r, a[3], a[4], tonumber(a[6]))
  if refusal then return { NOW, refusal, '' } end
  local _, ends = shown(a, 7)
  local before = r['until']
  r.expires, r['until'] = ends(ttl, r.hold_until), cut(NOW + ttl, r.cap)
  if a[10] ~= '' then r.meta = a[10] end
  write_lock(name, r)
  if r['until'] < before then announce('L', name) end
  return { NOW, 'renewed', r.raw }
end

-- Calls FOUND(name) for the names of index KIND between the lex bounds MIN and MAX (as
-- ZRANGEBYLEX takes them: the caller compares bytes, which Lua's strcoll might not), in
-- order, until it has said true LIMIT times (FOUND returns whether the name counts).
local function scan(kind, min, max, limit, found)
  local counted, batch = 0, math.max(limit, 64)
  while counted < limit do
    local names = redis.call('ZRANGEBYLEX', index_key(kind), min, max, 'LIMIT', 0, batch)
    for _, name in ipairs(names) do
      if found(name) then
        counted = counted + 1
        if counted == limit then return end
      end
    end
    if #names < batch then return end
    min = '(' .. names[#names]
  end
end

-- list MIN MAX LIMIT. Reply: NOW, then NAME RECORD per live lease, at most LIMIT.
local function list(a)
  local reply = { NOW }
  scan('L', a[2], a[3], tonumber(a[4]), function(name)
    local r = live_lock(name)
    if not r then return false end
    reply[#reply + 1] = name
    reply[#reply + 1] = r.raw
    return true
  end)
  return reply
end

-- Reading holds, and Redlock's proposals -----------------------------------------------------

local function read_holds(kind, name)
  local flat = redis.call('HGETALL', holds_key(kind, name))
  local holds = {}
  for i = 1, #flat, 2 do holds[#holds + 1] = decode(flat[i + 1]) end
  return holds
end

local function live_holds(kind, name)
  local live = {}
  for _, h in ipairs(read_holds(kind, name)) do
    if NOW < h['until'] then live[#live + 1] = h end
  end
  table.sort(live, function(x, y) return x.token < y.token end)
  return live
end

-- last KIND OWNER PRINCIPAL NAME...: since when this node keeps Redlock's state (MARKED, its
-- time then, or 0 for a node that is new or lost its data), then per name the last token the
-- node issued for it, how many slots follow, and the slots of the live permits of other
-- owners. Reply: NOW, MARKED, then TOKEN COUNT SLOT... per name.
local function last(a)
  local kind, owner, principal = a[2], a[3], a[4]
  local reply = { NOW, redis.call('GET', P .. 'node') or '0' }
  for i = 5, #a do
    reply[#reply + 1] = redis.call('GET', token_key(kind, a[i])) or '0'
    local slots = {}
    if kind == 'S' then
      for _, h in ipairs(live_holds('S', a[i])) do
        if not (h.owner == owner and h.principal == principal) then slots[#slots + 1] = h.slot end
      end
    end
    reply[#reply + 1] = #slots
    for _, slot in ipairs(slots) do reply[#reply + 1] = slot end
  end
  return reply
end

-- Every other operation is defined in `rarer`, built only when one of them is called: the
-- top level of a script runs on every call, and each function it defines is a closure made
-- anew each time (about half a microsecond each, with its garbage). Defining all of them
-- cost a lock's calls — most of the calls a node gets — a quarter of its acquire's time.
local function rarer()
  -- Semaphores and read-write locks ----------------------------------------------------------

  local function read_intents(name)
    local flat = redis.call('HGETALL', intents_key(name))
    local intents = {}
    for i = 1, #flat, 2 do
      local f = split(flat[i + 1])
      intents[#intents + 1] = { owner = flat[i], expires = tonumber(f[1]), principal = f[2] }
    end
    return intents
  end

  -- After a change to the holds or intents of NAME: when the next of them ends (for purges
  -- and the keys' backstop expiry), or forgets the name if nothing is left.
  local function settle(kind, name)
    local ends, last
    for _, h in ipairs(read_holds(kind, name)) do
      if not ends or h['until'] < ends then ends = h['until'] end
      if not last or h['until'] > last then last = h['until'] end
    end
    if kind == 'R' then
      for _, i in ipairs(read_intents(name)) do
        if not ends or i.expires < ends then ends = i.expires end
        if not last or i.expires > last then last = i.expires end
      end
      if last then redis.call('PEXPIRE', intents_key(name), num(last - NOW + GRACE)) end
    end
    local member = kind .. US .. name
    if ends then
      redis.call('ZADD', DUE, num(ends), member)
    else
      redis.call('ZREM', DUE, member)
    end
    if last and redis.call('EXISTS', holds_key(kind, name)) == 1 then
      redis.call('PEXPIRE', holds_key(kind, name), num(last - NOW + GRACE))
      redis.call('ZADD', index_key(kind), 0, name)
    else
      redis.call('ZREM', index_key(kind), name)
    end
  end

  -- acquire_hold KIND NAME OWNER PRINCIPAL CLAIM LIMIT TTL INTENT PROPOSAL SLOT CALL SHOWN_FROM
  -- SHOWN_PER_MILLE SHOWN_FIXED META (the hold's if new, '' keeps an extended one's): as fencelock_core::hold::judge decides; and, for a permit with
  -- a SLOT (1 to LIMIT, under Redlock), only if no other live permit has that slot here: a
  -- permit under Redlock is an exclusive lock on one of LIMIT slots, so that permits granted by
  -- different majorities can never add up to more than the limit (a count per node could:
  -- three nodes, limit 2, permits on nodes 1+2, 2+3 and 1+3). Reply: NOW, STATUS, RECORD, REPLACED, WRITER_WAITS,
  -- RETRY_IN, LIMIT, then every other owner's live hold (busy only). STATUS: granted (the new
  -- hold, the owner's hold it replaced or ''), extended, busy, limit (the live permits' limit),
  -- stale (RECORD: the node's last token); or 'unmarked', 'cancelled' or 'late' alone (see
  -- `barred`).
  local function acquire_hold(a)
    local kind, name, owner, principal, claim = a[2], a[3], a[4], a[5], a[6]
    local limit, ttl, intent, proposal = tonumber(a[7]), tonumber(a[8]), tonumber(a[9]), tonumber(a[10])
    local slot, call = tonumber(a[11]), a[12]
    local at, ends = shown(a, 13)
    local meta = a[16]
    local bar = barred(call, at, ttl)
    if bar then return { NOW, bar } end
    local live = live_holds(kind, name)
    local own, others = nil, {}
    for _, h in ipairs(live) do
      if h.owner == owner and h.principal == principal then own = h else others[#others + 1] = h end
    end
    local function busy(blocking, waiting)
      local ends
      for _, h in ipairs(blocking) do
        if not ends or h['until'] < ends then ends = h['until'] end
      end
      for _, i in ipairs(waiting) do
        if not ends or i.expires < ends then ends = i.expires end
      end
      local reply = { NOW, 'busy', '', '', #waiting > 0 and 1 or 0, ends and (ends - NOW) or 0, 0 }
      for _, h in ipairs(others) do reply[#reply + 1] = h.raw end
      return reply
    end
    local verdict
    for _, h in ipairs(others) do
      if h.owner == owner then
        verdict = busy({ h }, {})
      end
    end
    if not verdict and claim == 'permit' then
      for _, h in ipairs(live) do
        if h.claim == 'permit' and h.limit ~= limit then
          return { NOW, 'limit', '', '', 0, 0, h.limit }
        end
      end
      local taken = false
      for _, h in ipairs(others) do
        if slot > 0 and h.slot == slot then taken = true end
      end
      if own then
        verdict = 'extend'
      elseif #others < limit and not taken then
        verdict = 'grant'
      else
        verdict = busy(others, {})
      end
    elseif not verdict and claim == 'read' then
      if own and own.claim == 'read' then
        verdict = 'extend'
      elseif own then
        verdict = 'grant'
      else
        local writers, waiting = {}, {}
        for _, h in ipairs(others) do
          if h.claim == 'write' then writers[#writers + 1] = h end
        end
        for _, i in ipairs(read_intents(name)) do
          if not (i.owner == owner and i.principal == principal) and NOW < i.expires then
            waiting[#waiting + 1] = i
          end
        end
        if #writers == 0 and #waiting == 0 then verdict = 'grant' else verdict = busy(writers, waiting) end
      end
    elseif not verdict then
      if own and own.claim == 'write' then
        verdict = 'extend'
      elseif #others == 0 then
        verdict = 'grant'
      else
        verdict = busy(others, {})
      end
    end
    if type(verdict) == 'table' then
      if claim == 'write' and intent > 0 then
        redis.call('HSET', intents_key(name), owner, num(NOW + intent) .. US .. principal)
        settle(kind, name)
      end
      return verdict
    end
    local key = holds_key(kind, name)
    if verdict == 'extend' then
      local before, raw = own['until'], own.raw
      own.acquired, own.expires, own['until'] = at, ends(ttl, 0), NOW + ttl
      if meta ~= '' then own.meta = meta end
      redis.call('HSET', key, owner, encode(own))
      remember(call, kind .. US .. name, raw, own.raw, ttl)
      settle(kind, name)
      if own['until'] < before then announce(kind, name) end
      return { NOW, 'extended', own.raw, '', 0, 0, 0 }
    end
    local token, last = next_token(kind, name, proposal)
    if not token then return { NOW, 'stale', num(last), '', 0, 0, 0 } end
    local h = { token = token, acquired = at, expires = ends(ttl, 0), hold_until = 0, delay = 0,
      claim = claim, limit = claim == 'permit' and limit or 0, principal = principal, owner = owner,
      ['until'] = NOW + ttl, cap = 0, slot = slot, meta = meta }
    redis.call('HSET', key, owner, encode(h))
    if own then remember(call, kind .. US .. name, own.raw, h.raw, ttl) end
    if claim == 'write' then
      local i = redis.call('HGET', intents_key(name), owner)
      if i and split(i)[2] == principal then redis.call('HDEL', intents_key(name), owner) end
    end
    settle(kind, name)
    if own then announce(kind, name) end
    return { NOW, 'granted', h.raw, own and own.raw or '', 0, 0, 0 }
  end

  -- holds KIND NAME. Reply: NOW, then the live holds in token order.
  local function holds(a)
    local reply = { NOW }
    for _, h in ipairs(live_holds(a[2], a[3])) do reply[#reply + 1] = h.raw end
    return reply
  end

  -- The owner's live hold on NAME, or why not (as the SPEC orders it; holds are keyed by the
  -- owner's name, so a namesake of another principal is forbidden).
  local function own_hold(kind, name, owner, principal, token)
    local s = redis.call('HGET', holds_key(kind, name), owner)
    local h = s and decode(s)
    if not h or NOW >= h['until'] then return nil, 'notfound' end
    if h.principal ~= principal then return nil, 'forbidden' end
    if token and h.token ~= token then return nil, 'conflict' end
    return h
  end

  -- release_hold KIND NAME OWNER PRINCIPAL TOKEN. Reply: NOW, STATUS, the hold released or ''.
  local function release_hold(a)
    local kind, name, owner = a[2], a[3], a[4]
    local h, refusal = own_hold(kind, name, owner, a[5], tonumber(a[6]))
    if not h then return { NOW, refusal, '' } end
    redis.call('HDEL', holds_key(kind, name), owner)
    bury(kind, name, h)
    settle(kind, name)
    announce(kind, name)
    return { NOW, 'released', h.raw }
  end

  -- renew_hold KIND NAME OWNER PRINCIPAL TTL TOKEN SHOWN_FROM SHOWN_PER_MILLE SHOWN_FIXED META
  -- ('': keep the hold's). Reply: NOW,
  -- STATUS, the renewed hold or ''.
  local function renew_hold(a)
    local kind, name, owner, ttl = a[2], a[3], a[4], tonumber(a[6])
    local h, refusal = own_hold(kind, name, owner, a[5], tonumber(a[7]))
    if not h then return { NOW, refusal, '' } end
    local _, ends = shown(a, 8)
    local before = h['until']
    h.expires, h['until'] = ends(ttl, 0), NOW + ttl
    if a[11] ~= '' then h.meta = a[11] end
    redis.call('HSET', holds_key(kind, name), owner, encode(h))
    settle(kind, name)
    if h['until'] < before then announce(kind, name) end
    return { NOW, 'renewed', h.raw }
  end

  -- list_holds KIND MIN MAX LIMIT. Reply: NOW, then NAME COUNT RECORD... per name with live
  -- holds, at most LIMIT names.
  local function list_holds(a)
    local kind = a[2]
    local reply = { NOW }
    scan(kind, a[3], a[4], tonumber(a[5]), function(name)
      local live = live_holds(kind, name)
      if #live == 0 then return false end
      reply[#reply + 1] = name
      reply[#reply + 1] = #live
      for _, h in ipairs(live) do reply[#reply + 1] = h.raw end
      return true
    end)
    return reply
  end

  -- withdraw_intent NAME OWNER PRINCIPAL. Reply: NOW.
  local function withdraw_intent(a)
    local name, owner = a[2], a[3]
    local i = redis.call('HGET', intents_key(name), owner)
    if i and split(i)[2] == a[4] then
      redis.call('HDEL', intents_key(name), owner)
      settle('R', name)
      announce('R', name)
    end
    return { NOW }
  end

  -- force_release KIND NAME: every live lease, permit or hold of the name. Reply: NOW, then the
  -- records ended (a lock in its lock-delay stays closed; intents stay).
  local function force_release(a)
    local kind, name = a[2], a[3]
    local reply = { NOW }
    if kind == 'L' then
      local r = live_lock(name)
      if r then
        forget_lock(name)
        bury(kind, name, r)
        reply[2] = r.raw
      end
    else
      for _, h in ipairs(live_holds(kind, name)) do
        redis.call('HDEL', holds_key(kind, name), h.owner)
        bury(kind, name, h)
        reply[#reply + 1] = h.raw
      end
      settle(kind, name)
    end
    if #reply > 1 then announce(kind, name) end
    return reply
  end

  -- purge BATCH: forgets what ended (a lock once its lock-delay ended too). Reply: NOW, then
  -- KIND NAME RECORD per lease or hold forgotten.
  local function purge(a)
    local reply = { NOW }
    local due = redis.call('ZRANGEBYSCORE', DUE, '-inf', num(NOW), 'LIMIT', 0, tonumber(a[2]))
    for _, member in ipairs(due) do
      local kind, name = string.sub(member, 1, 1), string.sub(member, 3)
      if kind == 'L' then
        local r = read_lock(name)
        if r and closed_until(r) <= NOW then
          reply[#reply + 1], reply[#reply + 2], reply[#reply + 3] = kind, name, r.raw
        end
        if not r or closed_until(r) <= NOW then forget_lock(name) end
      else
        local freed = false
        for _, h in ipairs(read_holds(kind, name)) do
          if h['until'] <= NOW then
            redis.call('HDEL', holds_key(kind, name), h.owner)
            reply[#reply + 1], reply[#reply + 2], reply[#reply + 3] = kind, name, h.raw
            freed = true
          end
        end
        if kind == 'R' then
          for _, i in ipairs(read_intents(name)) do
            if i.expires <= NOW then
              redis.call('HDEL', intents_key(name), i.owner)
              freed = true
            end
          end
        end
        settle(kind, name)
        if freed then announce(kind, name) end
      end
    end
    return reply
  end

  -- Redlock ----------------------------------------------------------------------------------

  -- undo CALL MODE KIND OWNER PRINCIPAL TTL (NAME TOKEN)...: with MODE 'cancel', takes back what
  -- try CALL of a grant did to each NAME here: a lease or hold it extended or replaced is put
  -- back as it was (unless it changed since), one it granted anew (token TOKEN) is deleted; and
  -- marks the try cancelled, so that it changes nothing should it arrive later. With MODE
  -- 'stray' (a try that won elsewhere), only deletes what it granted anew here with TOKEN where
  -- the winning token is another. Reply: NOW.
  local function undo(a)
    local call, mode, kind, owner, principal, ttl = a[2], a[3], a[4], a[5], a[6], tonumber(a[7])
    local cancel = mode == 'cancel'
    local key = call_key(call)
    for i = 8, #a, 2 do
      local name, token = a[i], tonumber(a[i + 1])
      local field = kind .. US .. name
      local before, written
      if cancel then
        before = redis.call('HGET', key, 'b' .. US .. field)
        written = redis.call('HGET', key, 'w' .. US .. field)
      end
      local current
      if kind == 'L' then
        current = read_lock(name)
      else
        local s = redis.call('HGET', holds_key(kind, name), owner)
        current = s and decode(s)
      end
      local mine = current and current.owner == owner and current.principal == principal
      if mine and before and current.raw == written then
        if kind == 'L' then
          write_lock(name, decode(before))
        else
          redis.call('HSET', holds_key(kind, name), owner, before)
          settle(kind, name)
        end
        announce(kind, name)
      elseif mine and current.token == token then
        if kind == 'L' then
          forget_lock(name)
        else
          redis.call('HDEL', holds_key(kind, name), owner)
          settle(kind, name)
        end
        bury(kind, name, current)
        announce(kind, name)
      end
    end
    if cancel then
      redis.call('HSET', key, 'cancelled', '1')
      redis.call('PEXPIRE', key, num(ttl + GRACE))
    end
    return { NOW }
  end

  -- mark: this node keeps Redlock's state from now on (it took part from the start, or was
  -- brought up to date after it lost its data). Reply: NOW.
  local function mark(a)
    redis.call('SET', P .. 'node', num(NOW), 'NX')
    return { NOW }
  end

  -- export CURSOR PATTERN COUNT: one step of a SCAN over this node's keys (PATTERN: the
  -- prefix, escaped, then *), for bringing a node that lost its data up to date. Reply: NOW,
  -- the next cursor, then per key of state: 't' KIND NAME TOKEN (a token counter), 'l' NAME
  -- RECORD (a lock's lease), 'h' KIND NAME COUNT (OWNER RECORD)... (a semaphore's permits or
  -- a read-write lock's holds), or 'g' KIND NAME PTTL COUNT TOKEN... (what was ended here).
  local function export(a)
    local found = redis.call('SCAN', a[2], 'MATCH', a[3], 'COUNT', a[4])
    local reply = { NOW, found[1] }
    local function add(...)
      for _, x in ipairs({ ... }) do reply[#reply + 1] = x end
    end
    for _, key in ipairs(found[2]) do
      local rest = string.sub(key, #P + 1)
      local head, tail = string.match(rest, '^(%a+):(.*)$')
      if head == 'token' then
        add('t', string.sub(tail, 1, 1), string.sub(tail, 3), redis.call('GET', key) or '0')
      elseif head == 'lock' then
        local r = redis.call('GET', key)
        if r then add('l', tail, r) end
      elseif head == 'holds' then
        local flat = redis.call('HGETALL', key)
        add('h', string.sub(tail, 1, 1), string.sub(tail, 3), #flat / 2)
        for _, x in ipairs(flat) do reply[#reply + 1] = x end
      elseif head == 'gone' then
        local tokens = redis.call('HKEYS', key)
        add('g', string.sub(tail, 1, 1), string.sub(tail, 3), redis.call('PTTL', key), #tokens)
        for _, x in ipairs(tokens) do reply[#reply + 1] = x end
      end
    end
    return reply
  end

  -- adopt ITEM...: what `export` read on other nodes, taken in where it is more than this node
  -- keeps: a token counter raised to TOKEN, a lease or hold that is still live here, newer
  -- than this node's and not ended on any node ('g', which also ends such a copy taken in
  -- before). Reply: NOW.
  local function adopt(a)
    local i = 2
    while i <= #a do
      local what = a[i]
      if what == 't' then
        local key = token_key(a[i + 1], a[i + 2])
        local last = tonumber(redis.call('GET', key) or '0')
        if tonumber(a[i + 3]) > last then redis.call('SET', key, a[i + 3]) end
        i = i + 4
      elseif what == 'l' then
        local name, r = a[i + 1], decode(a[i + 2])
        local mine = read_lock(name)
        local ended = redis.call('HEXISTS', gone_key('L', name), num(r.token)) == 1
        if not ended and NOW < closed_until(r) and (not mine or mine.token < r.token) then write_lock(name, r) end
        i = i + 3
      elseif what == 'g' then
        local kind, name, pttl, count = a[i + 1], a[i + 2], tonumber(a[i + 3]), tonumber(a[i + 4])
        local key = gone_key(kind, name)
        for j = 1, count do
          local token = a[i + 4 + j]
          redis.call('HSET', key, token, '1')
          if kind == 'L' then
            local r = read_lock(name)
            if r and num(r.token) == token then forget_lock(name) end
          else
            for _, h in ipairs(read_holds(kind, name)) do
              if num(h.token) == token then redis.call('HDEL', holds_key(kind, name), h.owner) end
            end
            settle(kind, name)
          end
        end
        if pttl > 0 and redis.call('PTTL', key) < pttl then redis.call('PEXPIRE', key, pttl) end
        i = i + 5 + count
      else
        local kind, name, count = a[i + 1], a[i + 2], tonumber(a[i + 3])
        for j = 0, count - 1 do
          local owner, h = a[i + 4 + 2 * j], decode(a[i + 5 + 2 * j])
          local s = redis.call('HGET', holds_key(kind, name), owner)
          local ended = redis.call('HEXISTS', gone_key(kind, name), num(h.token)) == 1
          if not ended and NOW < h['until'] and (not s or decode(s).token < h.token) then
            redis.call('HSET', holds_key(kind, name), owner, h.raw)
          end
        end
        settle(kind, name)
        i = i + 4 + 2 * count
      end
    end
    return { NOW }
  end

  return {
    acquire_hold = acquire_hold, holds = holds, release_hold = release_hold,
    renew_hold = renew_hold, list_holds = list_holds, withdraw_intent = withdraw_intent,
    force_release = force_release, purge = purge, undo = undo, mark = mark,
    export = export, adopt = adopt,
  }
end

local ops = {
  acquire = acquire, get = get, release = release, renew = renew, list = list, last = last,
}

local op = ops[ARGV[1]] or rarer()[ARGV[1]]
if not op then return redis.error_reply('fencelock: unknown operation ' .. tostring(ARGV[1])) end
return op(ARGV)
