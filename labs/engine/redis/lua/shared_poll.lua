-- What became of a waiting attempt of the explicit queue: every server free by now first
-- takes the attempt the discipline picks (shared_queue.lua); then the attempt's decision,
-- once decided (read once), or its caller's give-up, or 'waiting' with when to ask again.
-- Mirrors labs/engine/shared.py MemorySharedModel.poll.
-- KEYS as shared_attempt.lua's first eight.
-- ARGV[1] now us ('' = Redis TIME), ARGV[2] the ticket, ARGV[3] the keys' TTL ms
-- Reply as shared_attempt.lua's (the 12th element, the ticket, only while waiting)
local m = KEYS[1]
local cfg = redis.call('HMGET', m, 'servers', 'service_us', 'max_queue_us', 'last',
  'trig', 'trig_from', 'trig_until', 'trig_pct', 'free', 'd_disc', 'd_lifo_us')
local servers = tonumber(cfg[1])
if not servers then return redis.error_reply('shared dependency not configured') end
local t
if ARGV[1] == '' then
  local now = redis.call('TIME')
  t = tonumber(now[1]) * 1000000 + tonumber(now[2])
else
  t = tonumber(ARGV[1])
end
local last = tonumber(cfg[4]) or 0
if t < last then t = last end
redis.call('HSET', m, 'last', string.format('%.0f', t))
local PACK = '<' .. string.rep('d', 64)
local free
if cfg[9] then
  free = {struct.unpack(PACK, cfg[9])}
else
  free = {}
  for i = 1, 64 do free[i] = 0 end
end
local disc = cfg[10]
if not disc or disc == '' then disc = 'fifo' end
local Q = shared_queue(KEYS, {cfg = cfg, free = free, servers = servers, disc = disc,
  lifo_us = tonumber(cfg[11]) or 100000, ttl = ARGV[3]})
Q.settle(t)
if Q.dirty() then redis.call('HSET', m, 'free', struct.pack(PACK, unpack(free, 1, 64))) end
local ticket = ARGV[2]
local function heard()
  local raw = redis.call('HGET', KEYS[8], ticket)
  if not raw then return nil end
  redis.call('HDEL', KEYS[8], ticket)
  local parts = {}
  for part in string.gmatch(raw .. '|', '([^|]*)|') do parts[#parts + 1] = part end
  local reply = {parts[1]}
  for i = 2, 9 do reply[i] = tonumber(parts[i]) end
  reply[10], reply[11] = parts[10], 0
  return reply
end
local done = heard()
if done then return done end
local w = Q.waiter(ticket)
if not w or w.given_up then return {'error', t, t, 0, 0, -1, 0, 0, 0, 'reset', 0} end
local give_up = Q.give_up_at(w)
if give_up and t >= give_up then
  Q.give_up(w)
  return heard()
end
return {'waiting', w.arrival, Q.poll_at(w, t), 0, 0, -1, 0, 0, w.offered, '', 0, ticket}
