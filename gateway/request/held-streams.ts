// Streams on the shared model routes (chat completions, /v1/messages, /v1/responses with
// `stream: true`), bounded per account and per client address (lib/held-limits.ts, issue 44): a
// stream holds its client's connection and an in-flight slot for as long as the backend
// generates, and without a bound one account could hold every slot of RC_GATEWAY_MAX_INFLIGHT
// (and thousands of descriptors). Non-stream requests are not counted here: they are answered
// whole, and the request-rate gate bounds how many an account starts.
import { HeldLimits, type HeldLimitSettings } from '../../lib/held-limits.js';

export type StreamLimitSettings = Pick<HeldLimitSettings, 'perAccount' | 'perAddress'>;

export const DEFAULT_STREAM_LIMITS: StreamLimitSettings = { perAccount: 256, perAddress: 512 };

/** Seconds a refused client is told to wait: streams end within seconds to minutes. */
export const STREAM_RETRY_AFTER_SEC = 5;

export function modelStreamLimits(settings: StreamLimitSettings): HeldLimits {
  // Addresses read lazily: a stream's own work is some 100k instructions, an address 5k.
  return new HeldLimits(
    'streams',
    { ...settings, lazyAddresses: true },
    { perAccount: 'RC_GATEWAY_STREAMS_PER_ACCOUNT', perAddress: 'RC_GATEWAY_STREAMS_PER_ADDRESS' },
    STREAM_RETRY_AFTER_SEC,
  );
}
