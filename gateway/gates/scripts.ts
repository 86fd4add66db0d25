// The two Lua scripts of the Redis store. They mirror memory-store.ts and math.ts exactly
// (levels scaled by 60000, integers only). Each runs atomically in Redis, so N gateways
// sharing Redis decide as one. Numbers go back to Redis as '%d' strings: Lua's default
// number formatting keeps only 14 significant digits.
//
// KEYS[1]: the account's bucket hash {r, t, ts}; KEYS[2]: the account's day hash
// {tokens, reserved, requests, n:<model>, i:<model>, o:<model>, c:<model>, ht:<hour>:<model>,
// hn:<hour>:<model>}. Both carry the account's hash
// tag, so they live in one Redis Cluster slot.

const CLOCK_AND_REFILL = `
local S = 60000
local now = tonumber(ARGV[1])
if not now then
  local tm = redis.call('TIME')
  now = tonumber(tm[1]) * 1000 + math.floor(tonumber(tm[2]) / 1000)
end
local rpm = tonumber(ARGV[2])
local tpm = tonumber(ARGV[3])
local rCap = rpm * S
local tCap = tpm * S
local b = redis.call('HMGET', KEYS[1], 'r', 't', 'ts')
local r = tonumber(b[1])
local t = tonumber(b[2])
local ts = tonumber(b[3])
if not (r and t and ts) then
  r = rCap; t = tCap; ts = now
elseif now > ts then
  r = r + (now - ts) * rpm
  t = t + (now - ts) * tpm
  ts = now
end
if r > rCap then r = rCap end
if t > tCap then t = tCap end
local function save()
  redis.call('HSET', KEYS[1], 'r', string.format('%d', r), 't', string.format('%d', t), 'ts', string.format('%d', ts))
  -- Expire once both buckets would be full again: a missing bucket reads as full. (At most
  -- 30 days: a debt that deep is forgiven.)
  local ttl = math.max(math.ceil((rCap - r) / rpm), math.ceil((tCap - t) / tpm)) + 1000
  redis.call('PEXPIRE', KEYS[1], string.format('%d', math.min(ttl, 2592000000)))
end
`;

/**
 * ARGV: now ('' = Redis TIME), rpm, tpm, dailyTokens, estimate, model, msToNextDay, dayTtlSec,
 * input (-1: not split), defaultOutput (0/1).
 * Returns {gate, waitMs, remainingRequests, remainingTokens, resetRequestsMs, resetTokensMs, maxOutput, estimate}.
 */
export const ADMIT_SCRIPT = `${CLOCK_AND_REFILL}
local cap = tonumber(ARGV[4])
local est = tonumber(ARGV[5])
local input = tonumber(ARGV[9])
local d = redis.call('HMGET', KEYS[2], 'tokens', 'reserved')
local used = (tonumber(d[1]) or 0) + (tonumber(d[2]) or 0)
local maxOut = -1
local dailyRoom = cap - used - input
if input >= 0 then
  maxOut = math.min(math.floor(t / S) - input, dailyRoom)
  local room = maxOut
  if room < 1 then room = dailyRoom end
  if ARGV[10] == '1' and room >= 1 and est - input > room then est = input + room end
end
local gate = 0
local wait = 0
if r < S then
  gate = 1
  wait = math.ceil((S - r) / rpm)
end
local needT = math.min(est, tpm) * S
if est > 0 and t < needT then
  local w = math.ceil((needT - t) / tpm)
  if w >= wait then gate = 2; wait = w end
end
if est > 0 and used + math.min(est, cap) > cap then
  gate = 3
  local w = tonumber(ARGV[7])
  if w > wait then wait = w end
end
if gate == 0 and input >= 0 and maxOut < 1 then
  if dailyRoom < 1 then
    gate = 3
    wait = tonumber(ARGV[7])
  else
    gate = 2
    wait = math.ceil(((input + 1) * S - t) / tpm)
  end
end
if gate == 0 then
  r = r - S
  t = t - est * S
  save()
  redis.call('HINCRBY', KEYS[2], 'reserved', est)
  redis.call('HINCRBY', KEYS[2], 'requests', 1)
  redis.call('HINCRBY', KEYS[2], 'n:' .. ARGV[6], 1)
  redis.call('EXPIRE', KEYS[2], ARGV[8])
end
return {gate, wait, math.floor(r / S), math.floor(t / S), math.ceil((rCap - r) / rpm), math.ceil((tCap - t) / tpm), maxOut, est}
`;

/**
 * ARGV: now ('' = Redis TIME), rpm, tpm, estimate, inputTokens, outputTokens, model, dayTtlSec, cachedTokens, hour.
 * Refunds (or charges) the token bucket by estimate - (input + output), releases the
 * reservation from the day and adds the real usage, also to the admission hour's counters
 * (`ht:<hour>:<model>` tokens, `hn:<hour>:<model>` finished requests). Returns 1.
 */
export const SETTLE_SCRIPT = `${CLOCK_AND_REFILL}
local est = tonumber(ARGV[4])
local input = tonumber(ARGV[5])
local output = tonumber(ARGV[6])
local refund = est - input - output
if refund ~= 0 then
  t = t + refund * S
  if t > tCap then t = tCap end
  save()
end
redis.call('HINCRBY', KEYS[2], 'reserved', 0 - est) -- not -est: Lua's -0 is not an integer to Redis
redis.call('HINCRBY', KEYS[2], 'tokens', input + output)
redis.call('HINCRBY', KEYS[2], 'i:' .. ARGV[7], input)
redis.call('HINCRBY', KEYS[2], 'o:' .. ARGV[7], output)
local cached = tonumber(ARGV[9]) or 0
if cached > 0 then redis.call('HINCRBY', KEYS[2], 'c:' .. ARGV[7], cached) end
local hm = ARGV[10] .. ':' .. ARGV[7]
redis.call('HINCRBY', KEYS[2], 'ht:' .. hm, input + output)
redis.call('HINCRBY', KEYS[2], 'hn:' .. hm, 1)
redis.call('EXPIRE', KEYS[2], ARGV[8])
return 1
`;
