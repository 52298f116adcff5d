-- Admission decision for one call and, when it admits, that call's first attempt reaching the
-- fake dependency: allow.lua and dependency.lua in one atomic round trip. RedisStore prepends
-- both scripts' text, each wrapped as a local function (allow, step) taking its own KEYS and
-- ARGV, so their rules are written once.
-- KEYS[1] dependency hash, KEYS[2] breaker hash, KEYS[3..] the probe slots
-- ARGV[1..8] as allow.lua's ARGV; ARGV[9] flaky count to arm with (dependency.lua's ARGV[2])
-- Reply {allow.lua's reply} when the call is refused or held back, else
--   {allow.lua's reply, dependency.lua's reply}
local breaker_keys = {}
for i = 2, #KEYS do breaker_keys[i - 1] = KEYS[i] end
local r = allow(breaker_keys, {ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7],
  ARGV[8]})
if type(r) == 'table' and r[1] ~= 0 and r[1] ~= 1 then return {r} end
return {r, step({KEYS[1]}, {ARGV[1], ARGV[9]})}
