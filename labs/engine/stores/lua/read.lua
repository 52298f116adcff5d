-- The stored breaker fields and the number of live probe leases (no transition is made).
-- KEYS[1] breaker hash, KEYS[2..] probe slots
local f = redis.call('HMGET', KEYS[1], 'state', 'gen', 'streak', 'opened_at', 'open_until',
  'ho_succ', 'win_s', 'win_f', 'forced')
local probes = 0
for i = 2, #KEYS do probes = probes + redis.call('EXISTS', KEYS[i]) end
for i = 1, 9 do if not f[i] then f[i] = '' end end
f[10] = tostring(probes)
return f
