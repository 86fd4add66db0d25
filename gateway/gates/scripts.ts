// The Lua script of the Redis store. It mirrors memory-store.ts and math.ts exactly (levels
// scaled by 60000, integers only) and runs atomically in Redis, so N gateways sharing Redis
// decide as one. Numbers go back to Redis as '%d' strings: Lua's default number formatting keeps
// only 14 significant digits.
//
// KEYS[1]: the account's bucket hash {r, t, ts}; KEYS[2]: the account's day hash
// {tokens, reserved, requests, n:<model>, i:<model>, o:<model>, c:<model>, ht:<hour>:<model>,
// hn:<hour>:<model>}. Both carry the account's hash tag, so they live in one Redis Cluster slot.

/**
 * The gate calls of one account and day, applied in order in one atomic step, each seeing the
 * buckets and the day as the calls before it left them: the same decisions as memory-store.ts
 * makes taking them one at a time. The store gathers the calls an event-loop turn makes for one
 * account (admissions of new requests, reconciliations of finished ones) into one script call:
 * under load a turn holds several, and each call costs Redis about 13 us of dispatch, Lua set-up
 * and hash reads and writes, most of it the same for one call or ten. The bucket is read once and written once, each day field incremented once.
 *
 * ARGV[1]: the day hash's TTL in seconds; ARGV[2..4]: the account's rpm, tpm and dailyTokens
 * (the store starts another call when they change); then the calls, in order:
 * - admission (4 values): 'a', model, now ('' = Redis TIME), then five numbers packed as
 *   little-endian doubles in one value (struct.unpack '<ddddd'): estimate, msToNextDay, input
 *   (-1: not split), defaultOutput (0/1), recountBelow (0: decide on the input; else the input
 *   is a bound, and a bound that bites answers gate 4, Recount, consuming nothing);
 * - reconciliation (4 values): 's', model, now, then packed the same way estimate, inputTokens,
 *   outputTokens, cachedTokens, hour. It refunds (or charges) the token bucket by estimate - (input + output),
 *   releases the reservation from the day and adds the real usage, also to the admission hour's
 *   counters (`ht:<hour>:<model>` tokens, `hn:<hour>:<model>` finished requests).
 *
 * Returns 8 numbers per admission, in order: gate, waitMs, remainingRequests, remainingTokens,
 * resetRequestsMs, resetTokensMs, maxOutput, estimate; as one string of little-endian doubles
 * (struct.pack), 64 bytes per admission, which the gateway reads with 8 DataView loads instead
 * of parsing 8 RESP integers a byte at a time (some 2.4k instructions an admission under
 * callgrind).
 *
 * (The marker, the model and an empty `now` come first, together: the store writes them as
 * bytes it made once per model, redis-store.ts `CallPrefixes`. The numbers go as doubles, 8
 * bytes each written in one store, rather than as decimal text written a digit at a time: some
 * 300 instructions a number in the gateway under callgrind, ten numbers a request.)
 */
export const GATE_SCRIPT = `
local S = 60000
local b = redis.call('HMGET', KEYS[1], 'r', 't', 'ts')
local r, t, ts = tonumber(b[1]), tonumber(b[2]), tonumber(b[3])
-- A missing bucket reads as full.
local exists = r ~= nil and t ~= nil and ts ~= nil
local touched = false
local d = redis.call('HMGET', KEYS[2], 'tokens', 'reserved')
local tokens = tonumber(d[1]) or 0
local reserved = tonumber(d[2]) or 0
local delta, fields = {}, {}
local function add(f, n)
  local v = delta[f]
  if v == nil then
    fields[#fields + 1] = f
    delta[f] = n
  else
    delta[f] = v + n
  end
end
local clock = nil
local out = {}
local rpm = tonumber(ARGV[2])
local tpm = tonumber(ARGV[3])
local cap = tonumber(ARGV[4])
local rCap = rpm * S
local tCap = tpm * S
-- The buckets refilled up to \`now\` at the current rates and kept so, as memory-store.ts does:
-- each interval is refilled at the rates in force when a call observed it, so a change of limits
-- acts from the next call on, in both stores alike.
local function refill(now)
  if not exists then
    r = rCap; t = tCap; ts = now
    exists = true
  elseif now > ts then
    r = r + (now - ts) * rpm
    t = t + (now - ts) * tpm
    ts = now
  end
  -- Also clamps levels above a capacity that was lowered since.
  if r > rCap then r = rCap end
  if t > tCap then t = tCap end
  touched = true
end
local i = 5
while i <= #ARGV do
  local model = ARGV[i + 1]
  local now = tonumber(ARGV[i + 2])
  if not now then
    if not clock then
      local tm = redis.call('TIME')
      clock = tonumber(tm[1]) * 1000 + math.floor(tonumber(tm[2]) / 1000)
    end
    now = clock
  end
  if ARGV[i] == 'a' then
    refill(now)
    local est, toNextDay, input, defaultOutput, recountBelow = struct.unpack('<ddddd', ARGV[i + 3])
    i = i + 4
    local used = tokens + reserved
    local maxOut = -1
    local dailyRoom = cap - used - input
    if input >= 0 then
      maxOut = math.min(math.floor(t / S) - input, dailyRoom)
      local room = maxOut
      if room < 1 then room = dailyRoom end
      if defaultOutput == 1 and room >= 1 and est - input > room then est = input + room end
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
      if toNextDay > wait then wait = toNextDay end
    end
    if gate == 0 and input >= 0 and maxOut < 1 then
      if dailyRoom < 1 then
        gate = 3
        wait = toNextDay
      else
        gate = 2
        wait = math.ceil(((input + 1) * S - t) / tpm)
      end
    end
    -- An input bound that bit (memory-store.ts recountWanted): nothing admitted, count and ask again.
    if recountBelow > 0 and input >= 0 then
      local recount = false
      if gate == 0 then
        recount = maxOut < recountBelow
      elseif gate == 2 or gate == 3 then
        recount = r >= S and math.floor(t / S) >= 2 and cap - used >= 2
      end
      if recount then gate = 4; wait = 0 end
    end
    if gate == 0 then
      r = r - S
      t = t - est * S
      reserved = reserved + est
      add('reserved', est)
      add('requests', 1)
      add('n:' .. model, 1)
    end
    out[#out + 1] = struct.pack('<dddddddd', gate, wait, math.floor(r / S), math.floor(t / S),
      math.ceil((rCap - r) / rpm), math.ceil((tCap - t) / tpm), maxOut, est)
  else
    local est, input, output, cached, hour = struct.unpack('<ddddd', ARGV[i + 3])
    i = i + 4
    local refund = est - input - output
    if refund ~= 0 then
      refill(now)
      t = t + refund * S
      if t > tCap then t = tCap end
    end
    reserved = reserved - est
    tokens = tokens + input + output
    add('reserved', 0 - est) -- not -est: Lua's -0 is not an integer to Redis
    add('tokens', input + output)
    add('i:' .. model, input)
    add('o:' .. model, output)
    if cached > 0 then add('c:' .. model, cached) end
    local hm = hour .. ':' .. model
    add('ht:' .. hm, input + output)
    add('hn:' .. hm, 1)
  end
end
if touched then
  redis.call('HSET', KEYS[1], 'r', string.format('%d', r), 't', string.format('%d', t), 'ts', string.format('%d', ts))
  -- Expire once both buckets would be full again: a missing bucket reads as full. (At most
  -- 30 days: a debt that deep is forgiven.)
  local ttl = math.max(math.ceil((rCap - r) / rpm), math.ceil((tCap - t) / tpm)) + 1000
  redis.call('PEXPIRE', KEYS[1], string.format('%d', math.min(ttl, 2592000000)))
end
for k = 1, #fields do
  local f = fields[k]
  redis.call('HINCRBY', KEYS[2], f, string.format('%d', delta[f]))
end
-- Every call that changed the day added to a field of it.
if #fields > 0 then redis.call('EXPIRE', KEYS[2], ARGV[1]) end
return table.concat(out)
`;
