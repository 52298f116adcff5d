-- Admission decision for one call. One atomic round trip.
-- KEYS[1] breaker hash, KEYS[2..] the probe slots (one per allowed probe)
-- ARGV[1] now (us, caller's clock), ARGV[2] lease token, ARGV[3] lease (ms),
-- ARGV[4] strict cooldown edge (0|1), ARGV[5] probes admitted per half-open period (0: no limit),
-- ARGV[6] gobreaker Interval (us, 0: none), ARGV[7] keep gobreaker's Counts (0|1),
-- ARGV[8] strict admission: the failure threshold (0: two-step admission)
-- A strict admission holds a breaker field i:<token> = lease end (us, caller's clock).
-- Reply: the generation alone (an integer) to admit a call in a closed breaker, the hot
-- path; else {code, generation, slot, open_until, moved} with
--   code 1 probe (slot leased), 2 rejected open, 3 rejected half-open, 0 admit after moving,
--   4 held back (strict admission: streak + calls in flight reach the threshold)
local b = KEYS[1]
local now = tonumber(ARGV[1])
local interval = tonumber(ARGV[6] or '0')
local counts = ARGV[7] == '1'
local function num(x) return string.format('%.0f', x) end
local f = redis.call('HMGET', b, 'state', 'gen', 'open_until', 'forced', 'streak')
local state = f[1] or 'closed'
local gen = tonumber(f[2] or '0')
local forced = f[4] or ''
if forced == 'open' then return {2, gen, -1, -1, 0} end
if forced == 'closed' then return gen end
local moved = 0
if state == 'open' then
  local open_until = tonumber(f[3] or '0')
  -- inclusive cooldown edge: at exactly open_until the breaker is half-open (strict: after)
  if now < open_until or (ARGV[4] == '1' and now == open_until) then
    return {2, gen, -1, open_until, 0}
  end
  gen = gen + 1
  redis.call('HSET', b, 'state', 'half_open', 'gen', gen, 'ho_succ', 0, 'ho_adm', 0,
    'ho_fail', 0, 'ho_slow', 0, 'c_req', 0, 'c_ts', 0, 'c_tf', 0, 'c_cs', 0, 'c_cf', 0)
  state = 'half_open'
  moved = 1
end
if state == 'closed' then
  local streak = tonumber(f[5] or '0')
  local cleared = false
  if interval > 0 then
    local expires = tonumber(redis.call('HGET', b, 'c_exp') or '0')
    if expires == 0 then
      redis.call('HSET', b, 'c_exp', num(now + interval))
    elseif now >= expires then
      -- gobreaker toNewGeneration: the closed state's counts clear, a new generation
      gen = gen + 1
      redis.call('HSET', b, 'gen', gen, 'streak', 0, 'c_req', 0, 'c_ts', 0, 'c_tf', 0,
        'c_cs', 0, 'c_cf', 0, 'c_exp', num(now + interval))
      streak, cleared = 0, true
    end
  end
  local threshold = tonumber(ARGV[8] or '0')
  if threshold > 0 then
    -- strict admission: count the live calls in flight (an expired one gave its place back)
    local all = redis.call('HGETALL', b)
    local live = 0
    for i = 1, #all, 2 do
      if string.sub(all[i], 1, 2) == 'i:' then
        if not cleared and tonumber(all[i + 1]) > now then live = live + 1
        else redis.call('HDEL', b, all[i]) end
      end
    end
    if streak + live >= threshold then return {4, gen, -1, 0, 0} end
    redis.call('HSET', b, 'i:' .. ARGV[2], num(now + tonumber(ARGV[3]) * 1000))
  end
  if counts then redis.call('HINCRBY', b, 'c_req', 1) end
  return gen
end
local limit = tonumber(ARGV[5])
if limit > 0 then
  local h = redis.call('HMGET', b, 'ho_adm', 'ho_succ', 'ho_fail')
  if tonumber(h[1] or '0') >= limit then
    -- every admission of the period is used; with no probe in flight, those without a
    -- result died (their results could only arrive stale): give their admissions back
    for i = 2, #KEYS do
      if redis.call('EXISTS', KEYS[i]) == 1 then return {3, gen, -1, 0, moved} end
    end
    local results = tonumber(h[2] or '0') + tonumber(h[3] or '0')
    redis.call('HSET', b, 'ho_adm', results)
    if results >= limit then return {3, gen, -1, 0, moved} end
  end
end
-- half-open: lease a free probe slot; a lease whose holder died expires by itself (PX)
for i = 2, #KEYS do
  if redis.call('SET', KEYS[i], ARGV[2], 'NX', 'PX', ARGV[3]) then
    if limit > 0 then redis.call('HINCRBY', b, 'ho_adm', 1) end
    if counts then redis.call('HINCRBY', b, 'c_req', 1) end
    return {1, gen, i - 2, 0, moved}
  end
end
return {3, gen, -1, 0, moved}
