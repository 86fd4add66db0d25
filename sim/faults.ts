// Faults on demand, for reliability tests: a standing fault (setFault / --fault), optionally for
// the next N requests only, or one request's fault from its `x-sim-fault` header.
import { z } from 'zod';

export const FAULT_KINDS = ['500', '429', 'close-mid-stream', 'stall-before', 'stall-during', 'error-mid-stream'] as const;
export type FaultKind = (typeof FAULT_KINDS)[number];

export interface Fault {
  kind: FaultKind;
  /** Apply to the next `count` chat completion requests only, then clear. Absent: until cleared. */
  count?: number | undefined;
  /** 429: the Retry-After value in seconds (default 1). */
  retryAfterS?: number | undefined;
  /** close-mid-stream / stall-during / error-mid-stream: content chunks sent before the fault (default 3). */
  afterChunks?: number | undefined;
}

export const faultSchema = z.strictObject({
  kind: z.enum(FAULT_KINDS),
  count: z.number().int().positive().optional(),
  retryAfterS: z.number().int().min(0).optional(),
  afterChunks: z.number().int().min(0).optional(),
});

export const DEFAULT_AFTER_CHUNKS = 3;
export const DEFAULT_RETRY_AFTER_S = 1;

/**
 * Parses a fault written as text: the kind, then optional `;key=value` parameters, e.g.
 * `429`, `429; retry-after=3`, `close-mid-stream; after=5`, `500; count=2`.
 * Returns undefined for an empty or unknown value.
 */
export function parseFault(text: string): Fault | undefined {
  const [kindText, ...params] = text.split(';');
  const kind = kindText!.trim() as FaultKind;
  if (!FAULT_KINDS.includes(kind)) return undefined;
  const fault: Fault = { kind };
  for (const p of params) {
    const [k, v] = p.split('=').map((s) => s.trim());
    const n = Number(v);
    if (!v || !Number.isInteger(n) || n < 0) return undefined;
    if (k === 'retry-after') fault.retryAfterS = n;
    else if (k === 'after') fault.afterChunks = n;
    else if (k === 'count' && n > 0) fault.count = n;
    else return undefined;
  }
  return fault;
}

/** The standing fault and its remaining count. */
export class FaultState {
  private fault: Fault | undefined;
  private remaining = Infinity;

  set(fault: Fault | undefined): void {
    this.fault = fault ? faultSchema.parse(fault) : undefined;
    this.remaining = fault?.count ?? Infinity;
  }

  get current(): Fault | undefined {
    return this.fault;
  }

  /** The fault for the next request (consuming one of its count), if any. */
  take(): Fault | undefined {
    const f = this.fault;
    if (!f) return undefined;
    if (--this.remaining <= 0) this.fault = undefined;
    return f;
  }
}
