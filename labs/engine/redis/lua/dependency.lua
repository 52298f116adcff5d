-- One attempt reaches the fake dependency. One atomic round trip.
-- KEYS[1] dependency hash; ARGV[1] now_us, ARGV[2] flaky count to arm with if unarmed
-- Reply {flaky counter before this attempt, armed-at (us), attempts before this one}
-- An armed-at below 0 (a rate limit armed to start at its first attempt) becomes now_us.
local d = KEYS[1]
if redis.call('EXISTS', d) == 0 then
  redis.call('HSET', d, 'fail_left', ARGV[2], 'started', ARGV[1], 'attempts', 0)
end
local f = redis.call('HMGET', d, 'fail_left', 'started', 'attempts')
if tonumber(f[2]) < 0 then
  redis.call('HSET', d, 'started', ARGV[1])
  f[2] = ARGV[1]
end
local left = tonumber(f[1])
if left > 0 then redis.call('HINCRBY', d, 'fail_left', -1) end
redis.call('HINCRBY', d, 'attempts', 1)
return {left, tonumber(f[2]), tonumber(f[3])}
