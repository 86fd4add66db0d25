// The Lua scripts of the attempt limits in Redis (redis-limits.ts). Each mirrors, step for step
// and in the same floating-point operations, what rate-limit.ts does in memory, and runs
// atomically in Redis, so control planes sharing it decide as one process would. Keys expire
// (PEXPIRE) once they no longer matter: a bucket when it is full again, a pair's failures
// PAIR_FORGET_MS after the last one, a known address KNOWN_ADDRESS_TTL_MS after its last success.
// The decisions never rely on the expiry (times are stored and compared as in memory), so a
// test clock that runs ahead of Redis's gets the same answers.
//
// Every script's ARGV[1] is `now` in ms, or '' for Redis TIME (one clock for every control plane:
// a pair's wait set through one is measured the same through another, whatever their clocks say).
// A bucket is a hash {t: tokens ('%.17g', exact), at: ms}; a missing one is full.

const COMMON = `
local function now_ms(arg)
  if arg ~= '' then return tonumber(arg) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function level(key, cap, period, now)
  local b = redis.call('HMGET', key, 't', 'at')
  local t, at = tonumber(b[1]), tonumber(b[2])
  if t == nil or at == nil then return cap end
  -- A clock behind the one that wrote the bucket refills nothing (never a negative refill).
  local elapsed = now - at
  if elapsed < 0 then elapsed = 0 end
  return math.min(cap, t + (elapsed * cap) / period)
end
local function wait_of(tokens, cap, period)
  if tokens >= 1 then return 0 end
  return math.ceil(((1 - tokens) * period) / cap)
end
local function store(key, tokens, cap, period, now)
  redis.call('HSET', key, 't', string.format('%.17g', tokens), 'at', string.format('%d', now))
  local full = math.ceil(((cap - tokens) * period) / cap)
  if full < 1 then full = 1 end
  redis.call('PEXPIRE', key, full)
end
`;

/**
 * Takes a token from every bucket, or from none (KeyedBuckets.take for one key; RedemptionLimits
 * for two). KEYS: the buckets; ARGV[2k], ARGV[2k+1]: bucket k's capacity and period (ms).
 * Returns 0, or the longest of the buckets' waits (ms) when one has no token.
 */
export const TAKE_SCRIPT = `${COMMON}
local now = now_ms(ARGV[1])
local levels = {}
local wait = 0
for i = 1, #KEYS do
  local cap, period = tonumber(ARGV[2 * i]), tonumber(ARGV[2 * i + 1])
  levels[i] = level(KEYS[i], cap, period, now)
  local w = wait_of(levels[i], cap, period)
  if w > wait then wait = w end
end
if wait > 0 then return wait end
for i = 1, #KEYS do store(KEYS[i], levels[i] - 1, tonumber(ARGV[2 * i]), tonumber(ARGV[2 * i + 1]), now) end
return 0
`;

/**
 * SignInLimits.admit. KEYS: the pair's failures {f, until, at}, the pair's last success (known
 * address), the account's failure bucket, the address's attempt bucket. ARGV[2]: the known
 * addresses' TTL; ARGV[3..4]: the failure bucket's capacity and period; ARGV[5..6]: the attempt
 * bucket's. Returns 0 (an attempt taken) or the ms to wait.
 */
export const ADMIT_SCRIPT = `${COMMON}
local now = now_ms(ARGV[1])
local blocked = tonumber(redis.call('HGET', KEYS[1], 'until'))
if blocked ~= nil and blocked > now then return blocked - now end
local known = tonumber(redis.call('GET', KEYS[2]))
if not (known ~= nil and now - known < tonumber(ARGV[2])) then
  local fcap, fperiod = tonumber(ARGV[3]), tonumber(ARGV[4])
  local w = wait_of(level(KEYS[3], fcap, fperiod, now), fcap, fperiod)
  if w > 0 then return w end
end
local cap, period = tonumber(ARGV[5]), tonumber(ARGV[6])
local l = level(KEYS[4], cap, period, now)
local w = wait_of(l, cap, period)
if w > 0 then return w end
store(KEYS[4], l - 1, cap, period, now)
return 0
`;

/**
 * SignInLimits.failed. KEYS: the pair's failures, the account's failure bucket. ARGV[2]: free
 * failures; ARGV[3]: the longest wait; ARGV[4]: how long after its last failure a pair is
 * forgotten; ARGV[5..6]: the failure bucket's capacity and period.
 */
export const FAILED_SCRIPT = `${COMMON}
local now = now_ms(ARGV[1])
local free, longest, forget = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local p = redis.call('HMGET', KEYS[1], 'f', 'until', 'at')
local f, blocked, at = tonumber(p[1]), tonumber(p[2]) or 0, tonumber(p[3])
if f == nil or at == nil or not (now - at < forget) then
  f = 0
  blocked = 0
end
f = f + 1
if f > free then blocked = now + math.min(longest, 1000 * 2 ^ (f - free - 1)) end
redis.call('HSET', KEYS[1], 'f', string.format('%d', f), 'until', string.format('%d', blocked), 'at', string.format('%d', now))
redis.call('PEXPIRE', KEYS[1], forget)
local fcap, fperiod = tonumber(ARGV[5]), tonumber(ARGV[6])
local l = level(KEYS[2], fcap, fperiod, now)
if l >= 1 then store(KEYS[2], l - 1, fcap, fperiod, now) end
return 0
`;

/** SignInLimits.succeeded. KEYS: the pair's failures, the pair's last success. ARGV[2]: the known addresses' TTL. */
export const SUCCEEDED_SCRIPT = `${COMMON}
local now = now_ms(ARGV[1])
redis.call('DEL', KEYS[1])
redis.call('SET', KEYS[2], string.format('%d', now), 'PX', ARGV[2])
return 0
`;
