-- The peer libraries' retry budgets. One atomic round trip.
-- KEYS[1] the peer budget hash
-- ARGV[1] 'throttle' (gRPC retry throttling, milli-tokens, starts full):
--   ARGV[2] success|failure, ARGV[3] ratio (milli), ARGV[4] max (milli)
--   success adds the ratio up to max, failure takes 1000 down to 0;
--   reply {retries allowed (2 x tokens > max), tokens}
-- ARGV[1] 'window' (Finagle's retry budget, starts with the reserve only):
--   ARGV[2] deposit|withdraw, ARGV[3] now_us, ARGV[4] slice_us, ARGV[5] reserve, ARGV[6] amount
--   the sum of the last 10 slices plus the reserve; deposit adds the amount to the current
--   slice, withdraw takes it if the sum holds it; reply {taken, sum after}
local k = KEYS[1]
if ARGV[1] == 'throttle' then
  local max = tonumber(ARGV[4])
  local tokens = tonumber(redis.call('HGET', k, 'throttle') or ARGV[4])
  if ARGV[2] == 'success' then
    tokens = math.min(max, tokens + tonumber(ARGV[3]))
  elseif ARGV[2] == 'failure' then
    tokens = math.max(0, tokens - 1000)
  end
  redis.call('HSET', k, 'throttle', string.format('%.0f', tokens))
  local allowed = 0
  if 2 * tokens > max then allowed = 1 end
  return {allowed, tokens}
end
local idx = math.floor(tonumber(ARGV[3]) / tonumber(ARGV[4]))
local amount = tonumber(ARGV[6])
local count = tonumber(ARGV[5])
local all = redis.call('HGETALL', k)
for i = 1, #all, 2 do
  if string.sub(all[i], 1, 2) == 'w:' then
    if tonumber(string.sub(all[i], 3)) <= idx - 10 then
      redis.call('HDEL', k, all[i])
    else
      count = count + tonumber(all[i + 1])
    end
  end
end
local field = 'w:' .. string.format('%.0f', idx)
if ARGV[2] == 'deposit' then
  redis.call('HINCRBY', k, field, amount)
  return {1, count + amount}
end
if count >= amount then
  redis.call('HINCRBY', k, field, -amount)
  return {1, count - amount}
end
return {0, count}
