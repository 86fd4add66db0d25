// Faults applied to a generation request (sim/faults.ts defines them): which fault a request
// gets, the faults that replace its answer (500, 429, stall-before), and those that break the
// answer off after part of it (close-mid-stream, stall-during).
import { sendJson } from '../lib/http.js';
import type { Call } from './calls.js';
import { DEFAULT_AFTER_CHUNKS, DEFAULT_RETRY_AFTER_S, parseFault, type Fault, type FaultState } from './faults.js';
import { SimRequestError } from './request.js';

/** The request's fault: its `x-sim-fault` header's (wins; unknown: a 400), else the standing one's (consuming one of its count). */
export function faultFor(header: string, standing: FaultState): Fault | undefined {
  if (!header) return standing.take();
  const fault = parseFault(header);
  if (!fault) throw new SimRequestError(400, `x-sim-fault: unknown fault ${JSON.stringify(header)}`, 'x-sim-fault');
  return fault;
}

/** Answers (or, stall-before, never answers) in place of the generation; false for a fault that acts later, in the answer. */
export function answeredByFault(call: Call, fault: Fault): boolean {
  switch (fault.kind) {
    case '500':
      call.fail({ status: 500, message: 'Simulated internal server error (sim fault 500)' });
      return true;
    case '429': {
      const a = call.error(429, 'Simulated rate limit (sim fault 429)');
      sendJson(call.res, a.status, a.body, { 'retry-after': String(fault.retryAfterS ?? DEFAULT_RETRY_AFTER_S) });
      call.end('completed');
      return true;
    }
    case 'stall-before':
      return true; // never answers; ends when the client goes away
    default:
      return false;
  }
}

/** Whether the fault breaks the answer off part way (close-mid-stream, stall-during, error-mid-stream). */
export const breaksOff = (fault: Fault | undefined): fault is Fault =>
  fault?.kind === 'close-mid-stream' || fault?.kind === 'stall-during' || fault?.kind === 'error-mid-stream';

/** The message of the error a generation fails with (error-mid-stream). */
export const MID_STREAM_ERROR = 'Simulated engine error during generation (sim fault error-mid-stream)';

/** The token events of `tokens` sent before a breaking fault hits; -1 without one. */
export const tokensBeforeFault = (fault: Fault | undefined, tokens: number): number =>
  breaksOff(fault) ? Math.min(tokens, fault.afterChunks ?? DEFAULT_AFTER_CHUNKS) : -1;

/** Where a breaking fault hits: close-mid-stream cuts the connection; stall-during keeps it open, silent. */
export function breakOff(call: Call, fault: Fault): void {
  if (fault.kind === 'close-mid-stream') call.cut();
}

/** A non-stream answer under a breaking fault: the head and half the body, then the fault (error-mid-stream: the server's 500). */
export function breakOffWholeAnswer(call: Call, json: string, fault: Fault): void {
  if (fault.kind === 'error-mid-stream') return call.fail({ status: 500, message: MID_STREAM_ERROR });
  const r = call.res;
  r.cork(() => {
    r.writeStatus('200 OK');
    r.writeHeader('content-type', 'application/json');
    r.write(json.slice(0, json.length >> 1));
  });
  breakOff(call, fault);
}
