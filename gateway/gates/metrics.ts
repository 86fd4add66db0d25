// Counters of the gates, for the gateway's /metrics (Prometheus text format). Process-wide:
// one gateway process runs one gate.

export const counters = {
  admitted: 0,
  deniedRequests: 0,
  deniedTokens: 0,
  deniedDaily: 0,
  /** Admissions whose input bound bit: answered "count the input and ask again" (nothing reserved). */
  recounts: 0,
  /** Admissions decided by the in-memory gates although Redis is configured. */
  redisFallback: 0,
  /** Redis calls that failed or timed out. */
  redisErrors: 0,
  redisTimeouts: 0,
  /** Scripts sent to Redis (EVALSHA, plus EVAL after a NOSCRIPT). */
  redisCalls: 0,
  /** Reconciliations that waited for Redis to come back, and those dropped because too many waited. */
  settleQueued: 0,
  settleDropped: 0,
};

/** 1 while the gates decide in Redis, 0 otherwise; set by the gate that owns the Redis store. */
export const gauges = { redisUp: 0 };

/** The gate counters in Prometheus text exposition format. */
export function gateMetrics(): string {
  const c = counters;
  return (
    '# HELP rc_gate_admitted_total Model API requests admitted by the gates.\n' +
    '# TYPE rc_gate_admitted_total counter\n' +
    `rc_gate_admitted_total ${c.admitted}\n` +
    '# HELP rc_gate_denied_total Model API requests refused with 429, by gate code.\n' +
    '# TYPE rc_gate_denied_total counter\n' +
    `rc_gate_denied_total{code="request_rate_limit_exceeded"} ${c.deniedRequests}\n` +
    `rc_gate_denied_total{code="token_rate_limit_exceeded"} ${c.deniedTokens}\n` +
    `rc_gate_denied_total{code="daily_token_cap_exceeded"} ${c.deniedDaily}\n` +
    '# HELP rc_gate_recount_total Admissions whose input bound (request bytes) would have refused or lowered them: counted exactly and asked again.\n' +
    '# TYPE rc_gate_recount_total counter\n' +
    `rc_gate_recount_total ${c.recounts}\n` +
    '# HELP rc_gate_redis_fallback_total Admissions decided in memory because Redis was unreachable or slow.\n' +
    '# TYPE rc_gate_redis_fallback_total counter\n' +
    `rc_gate_redis_fallback_total ${c.redisFallback}\n` +
    '# HELP rc_gate_redis_errors_total Gate calls to Redis that failed (timeouts included).\n' +
    '# TYPE rc_gate_redis_errors_total counter\n' +
    `rc_gate_redis_errors_total ${c.redisErrors}\n` +
    '# HELP rc_gate_redis_timeouts_total Gate calls to Redis that exceeded RC_GATE_REDIS_TIMEOUT_MS.\n' +
    '# TYPE rc_gate_redis_timeouts_total counter\n' +
    `rc_gate_redis_timeouts_total ${c.redisTimeouts}\n` +
    '# HELP rc_gate_redis_calls_total Scripts sent to Redis by the gates.\n' +
    '# TYPE rc_gate_redis_calls_total counter\n' +
    `rc_gate_redis_calls_total ${c.redisCalls}\n` +
    '# HELP rc_gate_settle_queued_total Reconciliations held until Redis returned.\n' +
    '# TYPE rc_gate_settle_queued_total counter\n' +
    `rc_gate_settle_queued_total ${c.settleQueued}\n` +
    '# HELP rc_gate_settle_dropped_total Reconciliations dropped because too many waited for Redis.\n' +
    '# TYPE rc_gate_settle_dropped_total counter\n' +
    `rc_gate_settle_dropped_total ${c.settleDropped}\n` +
    '# HELP rc_gate_redis_up Whether the gates currently decide in Redis.\n' +
    '# TYPE rc_gate_redis_up gauge\n' +
    `rc_gate_redis_up ${gauges.redisUp}\n`
  );
}
