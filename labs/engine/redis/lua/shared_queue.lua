-- The shared dependency's explicit queue (any discipline but FIFO): a prelude of
-- shared_attempt.lua and shared_poll.lua, called as shared_queue(KEYS, context), which
-- returns its functions. Mirrors labs/engine/shared.py MemorySharedModel._settle, _serve,
-- _give_up, _enqueue and _poll_at rule for rule.
-- KEYS as shared_attempt.lua's: [1] model, [2] counters, [5] the waiting attempts' tickets
-- (a sorted set scored by ticket: arrival order), [6] each one's "arrival|timeout|deadline|
-- session|offered|given_up" (-1: none), [7] propagated deadlines' instants by ticket,
-- [8] decisions not yet heard by their caller, "outcome|arrival|answer|start|finish|server|
-- wait|service|offered|reason". A session's counters are the key "<model's tag>:session:<id>"
-- (the same hash tag, so one slot on Redis Cluster).
-- ARGV is the caller's context: cfg (its HMGET of the model hash: [2] service_us,
-- [3] max_queue_us, [5]-[8] the trigger), free (the servers' free-at times, 1-based; the
-- caller writes them back when dirty() says so), servers, disc, lifo_us, ttl.
local c = ARGV
local k, kw, kh, kd, kdone = KEYS[2], KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local tag = string.sub(KEYS[1], 1, -7) -- the model key without ':model'
local LOOKAHEAD, POLL_MAX = 64, 1000000
local BOUNDS = {0, 1, 2, 3, 5, 7, 10, 15, 20, 30, 50, 70, 100, 150, 200, 300, 500, 700,
  1000, 1500, 2000, 3000, 5000, 7000, 10000}
local service_us, max_queue = tonumber(c.cfg[2]), tonumber(c.cfg[3])
local dirty = false
local Q = {}

local function fmt(x) return string.format('%.0f', x) end
local function sec(x) return fmt((x - x % 1000000) / 1000000) end

local function bucket(wait)
  for i = 1, #BOUNDS do
    if wait <= BOUNDS[i] * 1000 then return i - 1 end
  end
  return #BOUNDS - 1
end

-- an outcome counted for the class and the waiter's session, in the second of ``at``
local function count(session, at, name)
  redis.call('HINCRBY', k, sec(at) .. ':' .. name, 1)
  if session ~= '' then
    local sk = tag .. ':session:' .. session
    redis.call('HINCRBY', sk, sec(at) .. ':' .. name, 1)
    redis.call('PEXPIRE', sk, c.ttl)
  end
end

local function pack(w)
  return table.concat({fmt(w.arrival), fmt(w.timeout), fmt(w.deadline), w.session,
    fmt(w.offered), w.given_up and '1' or '0'}, '|')
end

function Q.waiter(ticket)
  local raw = ticket and redis.call('HGET', kh, ticket)
  if not raw then return nil end
  local a, to, dl, session, offered, gone =
    string.match(raw, '^(%-?%d+)|(%-?%d+)|(%-?%d+)|([^|]*)|(%d+)|(%d)$')
  return {ticket = ticket, arrival = tonumber(a), timeout = tonumber(to),
    deadline = tonumber(dl), session = session, offered = tonumber(offered),
    given_up = gone == '1'}
end

function Q.give_up_at(w)
  if w.deadline >= 0 then return w.arrival + w.deadline end
  if w.timeout >= 0 then return w.arrival + w.timeout end
  return nil
end

local function decided(w, outcome, answer, start, finish, server, wait, service, reason)
  redis.call('HSET', kdone, w.ticket, table.concat({outcome, fmt(w.arrival), fmt(answer),
    fmt(start), fmt(finish), server, fmt(wait), fmt(service), fmt(w.offered), reason}, '|'))
  redis.call('PEXPIRE', kdone, c.ttl)
end

local function leave(w)
  redis.call('ZREM', kw, w.ticket)
  redis.call('ZREM', kd, w.ticket)
  redis.call('HDEL', kh, w.ticket)
end

-- the caller stopped waiting: skipped (a propagated deadline: it leaves the queue) or
-- timeout (it stays; a server taking it later wastes its work)
function Q.give_up(w)
  local at = Q.give_up_at(w)
  local outcome = 'timeout'
  if w.deadline >= 0 then
    outcome = 'skipped'
    leave(w)
  else
    w.given_up = true
    redis.call('HSET', kh, w.ticket, pack(w))
  end
  count(w.session, at, outcome)
  decided(w, outcome, at, 0, 0, -1, at - w.arrival, 0, '')
end

local function service_at(at)
  local service, down = service_us, false
  local cfg = c.cfg
  if cfg[5] and cfg[5] ~= '' and tonumber(cfg[6]) <= at and at < tonumber(cfg[7]) then
    if cfg[5] == 'down' then
      down = true
    elseif cfg[5] == 'slow' then
      service = math.floor(service * tonumber(cfg[8]) / 100)
    end
  end
  return service, down
end

-- server ``best`` (0-based), free at ``at``, takes ``w``
local function serve(w, best, at)
  local give_up = Q.give_up_at(w)
  if not w.given_up and give_up and at >= give_up then
    Q.give_up(w)
    if w.deadline >= 0 then return end
  end
  leave(w)
  local wait = at - w.arrival
  if wait > max_queue then
    if not w.given_up then
      count(w.session, at, 'shed')
      decided(w, 'shed', at, 0, 0, -1, wait, 0, 'queue_wait')
    end
    return
  end
  local service, down = service_at(at)
  local finish = at + service
  c.free[best + 1] = finish
  dirty = true
  redis.call('HINCRBY', k, sec(w.arrival) .. ':q' .. bucket(wait), 1)
  local late = w.timeout >= 0 and finish - w.arrival > w.timeout
  if w.given_up or late then
    redis.call('HINCRBY', k, sec(finish) .. ':wasted_us', fmt(service))
  end
  if w.given_up then return end
  local answer, outcome = finish, 'ok'
  if late then
    answer, outcome = w.arrival + w.timeout, 'timeout'
  elseif down then
    outcome = 'error'
  else
    redis.call('HINCRBY', k, sec(finish) .. ':calls_ok', 1)
  end
  count(w.session, answer, outcome)
  decided(w, outcome, answer, at, finish, best, wait, service, '')
end

local function first_free()
  local best, at = 0, c.free[1]
  for i = 1, c.servers - 1 do
    if c.free[i + 1] < at then best, at = i, c.free[i + 1] end
  end
  return best, at
end

-- every server free by ``now`` takes the waiting attempt the discipline picks
function Q.settle(now)
  while redis.call('ZCARD', kw) > 0 do
    local best, at = first_free()
    if at > now then return end
    local newest = c.disc == 'lifo'
    if c.disc == 'adaptive_lifo' then
      local oldest = Q.waiter(redis.call('ZRANGE', kw, 0, 0)[1])
      newest = at - oldest.arrival > c.lifo_us
    end
    local ticket
    if newest then
      ticket = redis.call('ZRANGE', kw, -1, -1)[1]
    else
      ticket = redis.call('ZRANGE', kw, 0, 0)[1]
    end
    serve(Q.waiter(ticket), best, at)
  end
end

function Q.dirty() return dirty end

function Q.first_free() return first_free() end

-- a lower bound of when a server could take ``w`` (or it could leave), no later than its
-- give-up nor POLL_MAX away (see MemorySharedModel._poll_at)
function Q.poll_at(w, now)
  local older = redis.call('ZRANK', kw, w.ticket)
  local newer = redis.call('ZCARD', kw) - older - 1
  local ahead = 0
  if c.disc == 'lifo' then
    ahead = newer
  elseif c.disc == 'fifo' then
    ahead = older
  elseif c.lifo_us <= max_queue then
    ahead = math.min(older, newer)
  end
  local turns = {}
  for i = 1, c.servers do turns[i] = c.free[i] end
  local _, first = first_free()
  for _ = 1, math.min(ahead, LOOKAHEAD) do
    local j = 1
    for i = 2, c.servers do
      if turns[i] < turns[j] then j = i end
    end
    turns[j] = turns[j] + service_us
  end
  local bound = turns[1]
  for i = 2, c.servers do bound = math.min(bound, turns[i]) end
  local oldest = Q.waiter(redis.call('ZRANGE', kw, 0, 0)[1])
  local away = oldest.arrival + max_queue + 1
  local soonest = redis.call('ZRANGE', kd, 0, 0, 'WITHSCORES')
  if soonest[2] then away = math.min(away, tonumber(soonest[2])) end
  local at = math.min(bound, math.max(first, away), now + POLL_MAX)
  local give_up = Q.give_up_at(w)
  if give_up then at = math.min(at, give_up) end
  return at
end

-- queue an attempt that cannot start at its arrival: its reply (shed when the queue is full)
function Q.enqueue(t, timeout, deadline, session, offered, service, qlim)
  if qlim and redis.call('ZCARD', kw) >= qlim then
    count(session, t, 'shed')
    return {'shed', t, t, 0, 0, -1, 0, service, offered, 'queue_full', 0}
  end
  local ticket = fmt(redis.call('HINCRBY', KEYS[1], 'wseq', 1))
  local w = {ticket = ticket, arrival = t, timeout = timeout, deadline = deadline,
    session = session, offered = offered, given_up = false}
  redis.call('ZADD', kw, ticket, ticket)
  redis.call('HSET', kh, ticket, pack(w))
  if deadline >= 0 then redis.call('ZADD', kd, fmt(t + deadline), ticket) end
  for _, key in ipairs({kw, kh, kd}) do redis.call('PEXPIRE', key, c.ttl) end
  return {'waiting', t, Q.poll_at(w, t), 0, 0, -1, 0, service, offered, '', 0, ticket}
end

return Q
