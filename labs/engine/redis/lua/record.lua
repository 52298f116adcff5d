-- Count one call result and release its probe lease. One atomic round trip.
-- KEYS[1] breaker hash, KEYS[2] window hash, KEYS[3] window list,
-- KEYS[4] (probes only) the permit's probe lease
-- ARGV: 1 generation, 2 token, 3 outcome (s|f|i; S|F a slow success|failure), 4 now_us,
--       5 cooldown_us,
--       6 the breaker spec, space-separated (BreakerSpec order): rolling (0|1),
--         failure_threshold, ratio_ppm, min_calls, bucket_us, buckets, window_calls,
--         max_probes, success_threshold, strict_edge, failure_only, cooldown_mult_milli,
--         cooldown_max_us, half_open_calls, half_open_ratio, slow_us, slow_ppm, counts (0|1),
--         interval_us, strict (0|1)
-- A strict admission's result gives back its place (the breaker field i:<token>).
-- Reply: the generation alone (an integer) when the result was counted without a transition,
-- the hot path; else {code, generation, a, b, open_until} with
--   code 0 stale, 2 opened, 3 closed, 4 re-opened; a negative a: the slow-call rate opened it
local b = KEYS[1]
local function num(x) return string.format('%.0f', x) end

local f = redis.call('HMGET', b, 'state', 'gen', 'streak', 'ho_succ', 'forced', 'win_s', 'win_f',
  'opens', 'ho_adm', 'ho_fail', 'win_w', 'ho_slow', 'c_exp')
local gen = tonumber(f[2] or '0')
if not KEYS[4] and ARGV[2] ~= '-' then redis.call('HDEL', b, 'i:' .. ARGV[2]) end
-- a probe counts only while its lease still holds its token: an expired lease (gone, or
-- taken by a replacement probe) makes the result stale
if KEYS[4] then
  if redis.call('GET', KEYS[4]) ~= ARGV[2] then return {0, gen, 0, 0, 0} end
  redis.call('DEL', KEYS[4])
end
if tonumber(ARGV[1]) ~= gen then return {0, gen, 0, 0, 0} end
local outcome = ARGV[3]
local spec = {}
for v in string.gmatch(ARGV[6], '%S+') do spec[#spec + 1] = tonumber(v) end
-- strict admission: a transition outdates every call in flight
local function clear_inflight()
  if spec[20] ~= 1 then return end
  local names = redis.call('HKEYS', b)
  for i = 1, #names do
    if string.sub(names[i], 1, 2) == 'i:' then redis.call('HDEL', b, names[i]) end
  end
end
if (f[5] or '') ~= '' or outcome == 'i' then
  -- an ignored probe gives its half-open admission back
  if KEYS[4] and (f[5] or '') == '' and spec[14] > 0 and tonumber(f[9] or '0') > 0 then
    redis.call('HINCRBY', b, 'ho_adm', -1)
  end
  return gen
end
local state = f[1] or 'closed'
local now = tonumber(ARGV[4])
-- a slow call (resilience4j slowCallDurationThreshold) is S (success) or F (failure)
local ok = outcome == 's' or outcome == 'S'
local slow = (outcome == 'S' or outcome == 'F') and 1 or 0
if state == 'closed' and spec[19] > 0 then
  local expires = tonumber(f[13] or '0')
  if expires > 0 and now >= expires then
    -- gobreaker: the interval's end starts a new generation, to which this result does
    -- not belong
    gen = gen + 1
    redis.call('HSET', b, 'gen', gen, 'streak', 0, 'c_req', 0, 'c_ts', 0, 'c_tf', 0,
      'c_cs', 0, 'c_cf', 0, 'c_exp', num(now + spec[19]))
    clear_inflight()
    return {0, gen, 0, 0, 0}
  end
end
if spec[18] == 1 then
  -- gobreaker's Counts: onSuccess / onFailure
  if ok then
    redis.call('HINCRBY', b, 'c_ts', 1)
    redis.call('HINCRBY', b, 'c_cs', 1)
    redis.call('HSET', b, 'c_cf', 0)
  else
    redis.call('HINCRBY', b, 'c_tf', 1)
    redis.call('HINCRBY', b, 'c_cf', 1)
    redis.call('HSET', b, 'c_cs', 0)
  end
end

local function open(code, a, c)
  gen = gen + 1
  -- the cooldown grows with each consecutive opening: min(max, cooldown x mult^openings),
  -- each multiplication floored (as stores/base.py scaled_cooldown_us)
  local opens = tonumber(f[8] or '0')
  local cooldown = tonumber(ARGV[5])
  local mult, ceiling = spec[12], spec[13]
  if mult ~= 1000 then
    for _ = 1, opens do
      cooldown = math.floor(cooldown * mult / 1000)
      if ceiling > 0 and cooldown >= ceiling then break end
    end
  end
  if ceiling > 0 and cooldown > ceiling then cooldown = ceiling end
  local open_until = now + cooldown
  redis.call('HSET', b, 'state', 'open', 'gen', gen, 'opened_at', num(now),
    'open_until', num(open_until), 'streak', 0, 'ho_succ', 0, 'win_s', 0, 'win_f', 0,
    'opens', opens + 1, 'ho_adm', 0, 'ho_fail', 0, 'win_w', 0, 'ho_slow', 0)
  redis.call('HSET', b, 'c_req', 0, 'c_ts', 0, 'c_tf', 0, 'c_cs', 0, 'c_cf', 0, 'c_exp', 0)
  clear_inflight()
  redis.call('DEL', KEYS[2], KEYS[3])
  return {code, gen, a, c, open_until}
end

local function close(a, c)
  gen = gen + 1
  redis.call('HSET', b, 'state', 'closed', 'gen', gen, 'streak', 0, 'ho_succ', 0,
    'win_s', 0, 'win_f', 0, 'opens', 0, 'ho_adm', 0, 'ho_fail', 0, 'win_w', 0, 'ho_slow', 0)
  redis.call('HSET', b, 'c_req', 0, 'c_ts', 0, 'c_tf', 0, 'c_cs', 0, 'c_cf', 0,
    'c_exp', spec[19] > 0 and num(now + spec[19]) or 0)
  clear_inflight()
  redis.call('DEL', KEYS[2], KEYS[3])
  return {3, gen, a, c, 0}
end

if state == 'closed' then
  if spec[1] == 0 then
    if outcome == 's' then
      redis.call('HSET', b, 'streak', 0)
      return gen
    end
    local streak = tonumber(f[3] or '0') + 1
    if streak >= spec[2] then return open(2, streak, 0) end
    redis.call('HSET', b, 'streak', streak)
    return gen
  end
  local s, fl, w = 0, 0, 0
  local window_calls = spec[7]
  if window_calls > 0 then
    s = tonumber(f[6] or '0')
    fl = tonumber(f[7] or '0')
    w = tonumber(f[11] or '0') + slow
    if ok then s = s + 1 else fl = fl + 1 end
    if redis.call('LPUSH', KEYS[3], outcome) > window_calls then
      local oldest = redis.call('RPOP', KEYS[3])
      if oldest == 's' or oldest == 'S' then s = s - 1 else fl = fl - 1 end
      if oldest == 'S' or oldest == 'F' then w = w - 1 end
    end
    if spec[16] > 0 then
      redis.call('HSET', b, 'win_s', s, 'win_f', fl, 'win_w', w)
    else
      redis.call('HSET', b, 'win_s', s, 'win_f', fl)
    end
  else
    local idx = math.floor(now / spec[5])
    local oldest = idx - spec[6]
    redis.call('HINCRBY', KEYS[2], (ok and 's' or 'f') .. ':' .. num(idx), 1)
    -- a bucket's slow calls are counted under w:<bucket>
    if slow == 1 then redis.call('HINCRBY', KEYS[2], 'w:' .. num(idx), 1) end
    local all = redis.call('HGETALL', KEYS[2])
    for i = 1, #all, 2 do
      local kind = string.sub(all[i], 1, 1)
      local at = tonumber(string.sub(all[i], 3))
      if at > oldest then
        local n = tonumber(all[i + 1])
        if kind == 's' then s = s + n elseif kind == 'f' then fl = fl + n else w = w + n end
      else
        redis.call('HDEL', KEYS[2], all[i])
      end
    end
  end
  local total = s + fl
  -- the ratio is checked after every result, or after a failure only (spec[11])
  if (outcome == 'f' or spec[11] == 0) and total >= spec[4] then
    if fl * 1000000 >= spec[3] * total then return open(2, fl, total) end
    -- resilience4j: the slow-call rate opens the breaker as the failure rate does
    if spec[16] > 0 and w * 1000000 >= spec[17] * total then return open(2, -w, total) end
  end
  return gen
end

if state == 'half_open' then
  if spec[15] == 1 then
    -- decided on the failure ratio once half_open_calls results are in
    local succ = tonumber(f[4] or '0')
    local fails = tonumber(f[10] or '0')
    local w = tonumber(f[12] or '0') + slow
    if ok then succ = succ + 1 else fails = fails + 1 end
    local n = succ + fails
    if n >= spec[14] then
      if fails * 1000000 >= spec[3] * n then return open(4, fails, n) end
      if spec[16] > 0 and w * 1000000 >= spec[17] * n then return open(4, -w, n) end
      return close(succ, n)
    end
    redis.call('HSET', b, 'ho_succ', succ, 'ho_fail', fails, 'ho_slow', w)
    return gen
  end
  if not ok then return open(4, 0, 0) end
  local succ = tonumber(f[4] or '0') + 1
  if succ >= spec[9] then return close(succ, 0) end
  redis.call('HSET', b, 'ho_succ', succ)
  return gen
end
return gen
