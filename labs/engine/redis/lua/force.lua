-- Force open / closed (until reset) or reset. One atomic round trip.
-- KEYS[1] breaker hash, KEYS[2] window hash, KEYS[3] window list, KEYS[4..] probe slots
-- ARGV[1] action (open|closed|reset), ARGV[2] now_us
-- Reply {state before (as read at now), generation, changed (0: already forced so)}
local b = KEYS[1]
local now = tonumber(ARGV[2])
local f = redis.call('HMGET', b, 'state', 'gen', 'open_until', 'forced')
local before = f[1] or 'closed'
if (f[4] or '') ~= '' then
  before = f[4]
elseif before == 'open' and now >= tonumber(f[3] or '0') then
  before = 'half_open'
end
if (ARGV[1] == 'open' or ARGV[1] == 'closed') and f[4] == ARGV[1] then
  return {before, tonumber(f[2] or '0'), 0}
end
local gen = tonumber(f[2] or '0') + 1
redis.call('DEL', unpack(KEYS))
local state, forced, opened_at = 'closed', '', 0
if ARGV[1] == 'open' then
  state, forced, opened_at = 'open', 'open', string.format('%.0f', now)
elseif ARGV[1] == 'closed' then
  forced = 'closed'
end
redis.call('HSET', b, 'state', state, 'gen', gen, 'streak', 0, 'opened_at', opened_at,
  'open_until', 0, 'ho_succ', 0, 'win_s', 0, 'win_f', 0, 'forced', forced, 'opens', 0,
  'ho_adm', 0, 'ho_fail', 0)
return {before, gen, 1}
