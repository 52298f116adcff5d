-- The stored breaker fields and the number of live probe leases (no transition is made).
-- KEYS[1] breaker hash, KEYS[2] window hash, KEYS[3..] probe slots
-- ARGV[1] now_us, ARGV[2] bucket_us (0 unless a time window), ARGV[3] buckets,
-- ARGV[4] gobreaker Interval (us, 0: none): a closed state past its interval reads cleared
-- For a time window, win_s / win_f / win_w (slow) are the counts of the buckets still in it
-- at now.
local f = redis.call('HMGET', KEYS[1], 'state', 'gen', 'streak', 'opened_at', 'open_until',
  'ho_succ', 'win_s', 'win_f', 'forced', 'opens', 'ho_adm', 'ho_fail', 'win_w', 'ho_slow',
  'c_req', 'c_ts', 'c_tf', 'c_cs', 'c_cf', 'c_exp')
local probes = 0
for i = 3, #KEYS do probes = probes + redis.call('EXISTS', KEYS[i]) end
for i = 1, 20 do if not f[i] then f[i] = '' end end
local expires = tonumber(f[20]) or 0
if tonumber(ARGV[4] or '0') > 0 and (f[1] == '' or f[1] == 'closed') and f[9] == ''
    and expires > 0 and tonumber(ARGV[1]) >= expires then
  f[3] = '0'
  for i = 15, 19 do f[i] = '0' end
end
local bucket_us = tonumber(ARGV[2])
if bucket_us > 0 then
  local oldest = math.floor(tonumber(ARGV[1]) / bucket_us) - tonumber(ARGV[3])
  local s, fl, w = 0, 0, 0
  local all = redis.call('HGETALL', KEYS[2])
  for i = 1, #all, 2 do
    if tonumber(string.sub(all[i], 3)) > oldest then
      local kind, n = string.sub(all[i], 1, 1), tonumber(all[i + 1])
      if kind == 's' then s = s + n elseif kind == 'f' then fl = fl + n else w = w + n end
    end
  end
  f[7], f[8], f[13] = tostring(s), tostring(fl), tostring(w)
end
f[21] = tostring(probes)
return f
