// A non-stream generation answered as one JSON body, sent when its last token is due (after the
// prefill of its uncached prompt tokens and the decode; at once with `fast`), or broken off by a fault.
import { sendJson } from '../lib/http.js';
import type { Call } from './calls.js';
import type { Completion } from './completion.js';
import { breakOffWholeAnswer, breaksOff } from './fault-injection.js';
import type { Fault } from './faults.js';
import type { Pace } from './pace.js';

export function answerWhole(call: Call, completion: Completion, fault: Fault | undefined, pace: Pace): void {
  const json = completion.json();
  if (breaksOff(fault)) return breakOffWholeAnswer(call, json, fault);
  const send = () => {
    sendJson(call.res, 200, json);
    call.end('completed');
  };
  if (pace.fast) send();
  else call.after(pace.wholeAnswerDelayMs(completion.uncachedTokens, completion.plan.completionTokens), send);
}
