-- A retry of a call admitted earlier reaches the fake dependency only while the breaker reads
-- CLOSED (another caller's result may have moved it meanwhile): the state as read at now
-- (labs.engine.stores.base.effective_state) and, when closed, dependency.lua's step, in one
-- atomic round trip. RedisStore prepends dependency.lua's text wrapped as a local function.
-- KEYS[1] dependency hash, KEYS[2] breaker hash
-- ARGV[1] now (us), ARGV[2] strict cooldown edge (0|1), ARGV[3] flaky count to arm with
-- Reply {state} when not closed, else {'closed', dependency.lua's reply}
local f = redis.call('HMGET', KEYS[2], 'state', 'open_until', 'forced')
local state = f[1]
if not state or state == '' then state = 'closed' end
local forced = f[3]
if forced and forced ~= '' then
  state = forced
elseif state == 'open' then
  local now, untl = tonumber(ARGV[1]), tonumber(f[2] or '0')
  if now > untl or (ARGV[2] ~= '1' and now == untl) then state = 'half_open' end
end
if state ~= 'closed' then return {state} end
return {state, step({KEYS[1]}, {ARGV[1], ARGV[3]})}
