-- Fire, replace or clear the shared dependency's trigger. One atomic round trip.
-- Mirrors labs/engine/shared.py MemorySharedModel.trigger / clear_trigger.
-- KEYS[1] model hash
-- ARGV[1] op (trigger|clear), ARGV[2] now us ('' = Redis TIME),
-- ARGV[3] kind, ARGV[4] duration us, ARGV[5] factor pct, ARGV[6] servers in service
-- Reply {replaced kind or '', its from us, its till us}
local m = KEYS[1]
local function fmt(x) return string.format('%.0f', x) end
local cfg = redis.call('HMGET', m, 'servers', 'last', 'trig', 'trig_from', 'trig_until', 'held',
  'free')
local servers = tonumber(cfg[1])
if not servers then return redis.error_reply('shared dependency not configured') end
-- the servers' free-at times, packed as shared_attempt.lua keeps them
local PACK = '<' .. string.rep('d', 64)
local free
if cfg[7] then
  free = {struct.unpack(PACK, cfg[7])}
else
  free = {}
  for i = 1, 64 do free[i] = 0 end
end
local freed = false
local t
if ARGV[2] == '' then
  local now = redis.call('TIME')
  t = tonumber(now[1]) * 1000000 + tonumber(now[2])
else
  t = tonumber(ARGV[2])
end
local last = tonumber(cfg[2]) or 0
if t < last then t = last end
-- end the running trigger
local replaced = {'', 0, 0}
local kind = cfg[3]
if kind and kind ~= '' then
  local from, till = tonumber(cfg[4]), tonumber(cfg[5])
  if kind == 'capacity' and t < till and cfg[6] and cfg[6] ~= '' then
    for entry in string.gmatch(cfg[6], '[^,]+') do
      local i, before = string.match(entry, '(%d+)=(%d+)')
      local k = tonumber(i) + 1
      if free[k] == till then
        local back = tonumber(before)
        if back < t then back = t end
        free[k] = back
        freed = true
      end
    end
  end
  if t < till then replaced = {kind, from, till} end
end
redis.call('HSET', m, 'trig', '', 'held', '')
if ARGV[1] == 'trigger' then
  local till = t + tonumber(ARGV[4])
  local keep = tonumber(ARGV[6])
  if keep > servers then keep = servers end
  redis.call('HSET', m, 'trig', ARGV[3], 'trig_from', fmt(t), 'trig_until', fmt(till),
    'trig_pct', ARGV[5], 'trig_servers', keep)
  if ARGV[3] == 'capacity' then
    local held = {}
    for i = keep, servers - 1 do
      local f = free[i + 1]
      held[#held + 1] = i .. '=' .. fmt(f)
      if f < till then
        free[i + 1] = till
        freed = true
      end
    end
    redis.call('HSET', m, 'held', table.concat(held, ','))
  end
end
if freed then redis.call('HSET', m, 'free', struct.pack(PACK, unpack(free, 1, 64))) end
return replaced
