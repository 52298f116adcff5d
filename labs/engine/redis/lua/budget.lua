-- Retry budget token bucket, in micro-tokens. One atomic round trip.
-- KEYS[1] budget hash; ARGV[1] op (deposit|withdraw), ARGV[2] ratio, ARGV[3] ceiling
-- The bucket starts full. Reply {taken (withdraw) or 1 (deposit), balance}
local k = KEYS[1]
local max = tonumber(ARGV[3])
local tokens = tonumber(redis.call('HGET', k, 'tokens') or ARGV[3])
local taken = 1
if ARGV[1] == 'deposit' then
  tokens = math.min(max, tokens + tonumber(ARGV[2]))
elseif tokens >= 1000000 then
  tokens = tokens - 1000000
else
  taken = 0
end
redis.call('HSET', k, 'tokens', string.format('%.0f', tokens))
return {taken, tokens}
