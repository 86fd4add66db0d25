// The error codes of the gates: the `code` of a 429 names the gate that refused (SPEC "Errors").
// Stable: clients may branch on them.

/**
 * Which gate refused; 0 means admitted. The numbers are what the Redis script returns.
 * `Recount`: nothing was admitted or consumed, the input was a bound that would have refused the
 * request or lowered its output (exact caps): count the input and ask again (README "Exact caps").
 */
export const GateKind = { None: 0, Requests: 1, Tokens: 2, Daily: 3, Recount: 4 } as const;

export const GATE_CODES = {
  /** The per-account request-rate bucket (requests per minute) is empty. */
  [GateKind.Requests]: 'request_rate_limit_exceeded',
  /** The per-account token-rate bucket (input + output tokens per minute) is short of the estimate. */
  [GateKind.Tokens]: 'token_rate_limit_exceeded',
  /** The per-account daily token cap (UTC day) is reached. */
  [GateKind.Daily]: 'daily_token_cap_exceeded',
} as const;

export type GateCode = (typeof GATE_CODES)[keyof typeof GATE_CODES];

/** The message of every gate 429 (SPEC "Specific cases"). */
export const RATE_LIMIT_MESSAGE = 'Model API rate limit exceeded; please retry later';

/**
 * The gates' internal error codes (`RcError.code`) with their class. The table "Internal error
 * codes" of gateway/gates/README.md lists the same (test/gateway/error-codes.test.ts).
 */
export const GATE_ERROR_CODES = {
  RC_ERR_INVALID_DAY: 'InvalidDayError',
  RC_ERR_GATE_REDIS: 'GateRedisError',
} as const;

export type GateErrorCode = keyof typeof GATE_ERROR_CODES;
