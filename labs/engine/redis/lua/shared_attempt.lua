-- One attempt at the shared dependency: the decision and its counters, one atomic round trip.
-- Mirrors labs/engine/shared.py MemorySharedModel.decide rule for rule.
-- KEYS[1] model hash {servers, service_us, max_queue_us, last, trig*, free, the defences
--   d_rate, d_burst, d_queue, d_conc, d_adapt, d_cmax, d_lat_us, d_codel_us, d_codel_int_us
--   ('' off) and their state tb_tokens, tb_at, codel_since, c_limit, c_fastest, seq}:
--   ``free`` packs the 64 servers' free-at times as little-endian doubles (exact integers up
--   to 2^53 us)
-- KEYS[2] counters hash "<second>:<name>" -> count
-- KEYS[3], KEYS[4] sorted sets of the accepted attempts' start and finish times (kept only
--   while a queue or concurrency limit is on); a finish's member is its number (12 digits,
--   so that equal times sort in the order accepted), latency us and failure: "n:lat:0|1"
-- KEYS[5] to KEYS[8] the explicit queue of a discipline but FIFO (shared_queue.lua)
-- KEYS[9] (optional) the calling session's counters hash "<second>:<name>" -> count, with
--   "<second>:state" (the breaker's state) and "last" (its latest arrival second)
-- ARGV[1] arrival us ('' = Redis TIME), ARGV[2] timeout us (-1 none),
-- ARGV[3] deadline us after arrival (-1 none), ARGV[4] attempt number (0: a call the
-- session's breaker refused, counted for the session only), ARGV[5] counters TTL ms,
-- ARGV[6] the session's breaker state, ARGV[7] seconds a session's counters are kept
-- Reply {outcome, arrival, answer, start, finish, server (0-based, -1), wait, service,
--   the arrival second's offered count after this attempt, why it was shed, Retry-After us}
--   and, for an attempt that waits in the explicit queue, outcome 'waiting', answer the
--   instant to ask shared_poll.lua again, and a 12th element, its ticket
local m, k, zs, zf, sk = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[9]
local cfg = redis.call('HMGET', m, 'servers', 'service_us', 'max_queue_us', 'last',
  'trig', 'trig_from', 'trig_until', 'trig_pct', 'free', 'd_rate', 'd_burst', 'd_queue',
  'd_conc', 'd_codel_us', 'd_codel_int_us', 'tb_tokens', 'tb_at', 'codel_since',
  'd_adapt', 'd_cmax', 'd_lat_us', 'c_limit', 'c_fastest', 'd_disc', 'd_lifo_us')
local servers = tonumber(cfg[1])
if not servers then return redis.error_reply('shared dependency not configured') end
local t
if ARGV[1] == '' then
  local now = redis.call('TIME')
  t = tonumber(now[1]) * 1000000 + tonumber(now[2])
else
  t = tonumber(ARGV[1])
end
local last = tonumber(cfg[4]) or 0
if t < last then t = last end
local function fmt(x) return string.format('%.0f', x) end
local function sec(x) return fmt((x - x % 1000000) / 1000000) end
local s = sec(t)
local attempt = tonumber(ARGV[4])
-- the session's own counters, beside the class's: a new arrival second first drops the
-- seconds that have grown older than the keep (one HDEL a second), or everything after a
-- longer pause
local NAMES = {'offered', 'calls', 'retries', 'ok', 'error', 'shed', 'skipped', 'limited',
  'timeout', 'fast', 'state'}
local function mine(at, name, n)
  if sk then redis.call('HINCRBY', sk, at .. ':' .. name, n) end
end
if sk then
  local keep = tonumber(ARGV[7])
  local now_s = tonumber(s)
  local prev = tonumber(redis.call('HGET', sk, 'last') or '0')
  if now_s > prev then
    if prev > 0 and now_s - prev < keep then
      for x = prev - keep + 1, now_s - keep do
        local gone = {}
        for i = 1, #NAMES do gone[i] = fmt(x) .. ':' .. NAMES[i] end
        redis.call('HDEL', sk, unpack(gone))
      end
    elseif prev > 0 then
      redis.call('DEL', sk)
    end
    redis.call('HSET', sk, 'last', s)
  end
  redis.call('HSET', sk, s .. ':state', ARGV[6])
  redis.call('PEXPIRE', sk, ARGV[5])
end
if attempt < 1 then
  mine(s, 'fast', 1)
  return {'refused', t, t, 0, 0, -1, 0, 0, 0, '', 0}
end
redis.call('HSET', m, 'last', fmt(t))
local service = tonumber(cfg[2])
local down = false
if cfg[5] and cfg[5] ~= '' and tonumber(cfg[6]) <= t and t < tonumber(cfg[7]) then
  if cfg[5] == 'down' then
    down = true
  elseif cfg[5] == 'slow' then
    service = math.floor(service * tonumber(cfg[8]) / 100)
  end
end
-- one field for every server's free-at time: a read, a scan and a write of one packed
-- string cost a fraction of an HMGET and an HSET of 64 fields (benchmarks/storm_bench.py)
local PACK = '<' .. string.rep('d', 64)
local free
if cfg[9] then
  free = {struct.unpack(PACK, cfg[9])}
else
  free = {}
  for i = 1, 64 do free[i] = 0 end
end
local best, best_free = 0, free[1]
for i = 1, servers - 1 do
  local f = free[i + 1]
  if f < best_free then best, best_free = i, f end
end
local start = t
if best_free > t then start = best_free end
local wait = start - t
local offered = redis.call('HINCRBY', k, s .. ':offered', 1)
mine(s, 'offered', 1)
if attempt <= 1 then
  redis.call('HINCRBY', k, s .. ':calls', 1)
  mine(s, 'calls', 1)
else
  redis.call('HINCRBY', k, s .. ':retries', 1)
  mine(s, 'retries', 1)
end
redis.call('PEXPIRE', k, ARGV[5])
local function num(x) if x and x ~= '' then return tonumber(x) end return nil end
-- the server's defences, as MemorySharedModel._take_token and _shed_reason decide them
local rate = num(cfg[10])
if rate then
  local burst = tonumber(cfg[11])
  local tokens = num(cfg[16]) or burst
  tokens = math.min(burst, tokens + (t - (num(cfg[17]) or 0)) * rate / 1e6)
  local after = 0
  if tokens < 1 then
    after = math.max(1, math.ceil((1 - tokens) * 1e6 / rate))
  else
    tokens = tokens - 1
  end
  redis.call('HSET', m, 'tb_tokens', string.format('%.17g', tokens), 'tb_at', fmt(t))
  if after > 0 then
    redis.call('HINCRBY', k, s .. ':limited', 1)
    mine(s, 'limited', 1)
    return {'limited', t, t, 0, 0, -1, 0, service, offered, '', after}
  end
end
local qlim, clim, counted = num(cfg[12]), num(cfg[13]), false
-- a discipline but FIFO, or attempts still queued from one: the explicit queue
local disc = cfg[24]
if not disc or disc == '' then disc = 'fifo' end
if disc ~= 'fifo' or redis.call('EXISTS', KEYS[5]) == 1 then
  local Q = shared_queue(KEYS, {cfg = cfg, free = free, servers = servers, disc = disc,
    lifo_us = num(cfg[25]) or 100000, ttl = ARGV[5]})
  Q.settle(t)
  if Q.dirty() then redis.call('HSET', m, 'free', struct.pack(PACK, unpack(free, 1, 64))) end
  best, best_free = Q.first_free()
  if redis.call('ZCARD', KEYS[5]) > 0 or best_free > t then
    local session = ''
    if sk then session = string.sub(sk, string.len(m) - 6 + 10) end -- after ":session:"
    return Q.enqueue(t, tonumber(ARGV[2]), tonumber(ARGV[3]), session, offered, service, qlim)
  end
  start, wait = t, 0
end
local reason = ''
if wait > tonumber(cfg[3]) then
  reason = 'queue_wait'
else
  if qlim or clim then
    counted = true
    redis.call('ZREMRANGEBYSCORE', zs, '-inf', fmt(t))
    local limit_now = clim
    if clim and cfg[19] and cfg[19] ~= 'fixed' then
      -- an adaptive limit: each attempt finished by now moves it, in the order they finished
      local limit, fastest = num(cfg[22]) or clim, num(cfg[23])
      local due = redis.call('ZRANGEBYSCORE', zf, '-inf', fmt(t))
      if #due > 0 then
        local total = redis.call('ZCARD', zf)
        local high, slow = tonumber(cfg[20]), tonumber(cfg[21])
        for i = 1, #due do
          local lat, failed = string.match(due[i], '^%d+:(%d+):(%d)$')
          lat = tonumber(lat)
          if cfg[19] == 'aimd' then
            if failed == '1' or lat > slow then
              limit = math.max(1, math.floor(limit * 0.9))
            elseif (total - i + 1) * 2 >= limit then
              limit = math.min(high, limit + 1)
            end
          else
            if fastest then fastest = math.min(fastest, lat) else fastest = lat end
            fastest = math.max(1, fastest)
            local gradient = math.max(0.5, math.min(1.0, fastest / math.max(1, lat)))
            local new = limit * gradient + math.sqrt(limit)
            limit = math.max(1.0, math.min(high, limit * 0.8 + new * 0.2))
          end
        end
        redis.call('HSET', m, 'c_limit', string.format('%.17g', limit))
        if fastest then redis.call('HSET', m, 'c_fastest', fmt(fastest)) end
      end
      limit_now = math.floor(limit)
    end
    redis.call('ZREMRANGEBYSCORE', zf, '-inf', fmt(t))
    if clim and redis.call('ZCARD', zf) >= limit_now then
      reason = 'concurrency'
    elseif qlim and wait > 0 and redis.call('ZCARD', zs) >= qlim then
      reason = 'queue_full'
    end
  end
  local target = num(cfg[14])
  if reason == '' and target then
    local since = num(cfg[18]) or -1
    if wait <= target then
      if since >= 0 then redis.call('HSET', m, 'codel_since', '-1') end
    elseif since < 0 then
      redis.call('HSET', m, 'codel_since', fmt(t))
    elseif t - since >= tonumber(cfg[15]) then
      reason = 'codel'
    end
  end
end
if reason ~= '' then
  redis.call('HINCRBY', k, s .. ':shed', 1)
  mine(s, 'shed', 1)
  return {'shed', t, t, 0, 0, -1, wait, service, offered, reason, 0}
end
local deadline = tonumber(ARGV[3])
if deadline >= 0 and start >= t + deadline then
  redis.call('HINCRBY', k, s .. ':skipped', 1)
  mine(s, 'skipped', 1)
  return {'skipped', t, t, 0, 0, -1, wait, service, offered, '', 0}
end
local finish = start + service
free[best + 1] = finish
redis.call('HSET', m, 'free', struct.pack(PACK, unpack(free, 1, 64)))
if counted then
  local n = redis.call('HINCRBY', m, 'seq', 1)
  local id = string.format('%012d', n)
  local late = tonumber(ARGV[2]) >= 0 and finish - t > tonumber(ARGV[2])
  local failed = (down or late) and '1' or '0'
  redis.call('ZADD', zs, fmt(start), id)
  redis.call('ZADD', zf, fmt(finish), id .. ':' .. fmt(finish - t) .. ':' .. failed)
  redis.call('PEXPIRE', zs, ARGV[5])
  redis.call('PEXPIRE', zf, ARGV[5])
end
-- queue-wait histogram: bounds in ms, as WAIT_BOUNDS_MS
local bounds = {0, 1, 2, 3, 5, 7, 10, 15, 20, 30, 50, 70, 100, 150, 200, 300, 500, 700,
  1000, 1500, 2000, 3000, 5000, 7000, 10000}
local bucket = #bounds - 1
for i = 1, #bounds do
  if wait <= bounds[i] * 1000 then bucket = i - 1; break end
end
redis.call('HINCRBY', k, s .. ':q' .. bucket, 1)
local timeout = tonumber(ARGV[2])
if timeout >= 0 and finish - t > timeout then
  local answer = t + timeout
  redis.call('HINCRBY', k, sec(answer) .. ':timeout', 1)
  mine(sec(answer), 'timeout', 1)
  redis.call('HINCRBY', k, sec(finish) .. ':wasted_us', fmt(service))
  return {'timeout', t, answer, start, finish, best, wait, service, offered, '', 0}
end
local fs = sec(finish)
if down then
  redis.call('HINCRBY', k, fs .. ':error', 1)
  mine(fs, 'error', 1)
  return {'error', t, finish, start, finish, best, wait, service, offered, '', 0}
end
redis.call('HINCRBY', k, fs .. ':ok', 1)
redis.call('HINCRBY', k, fs .. ':calls_ok', 1)
mine(fs, 'ok', 1)
return {'ok', t, finish, start, finish, best, wait, service, offered, '', 0}
