// A load scenario: starts its targets (separate processes), compares them under the same load,
// and stops them. The gateway's scenario starts a sim and a gateway in front of it and compares
// "gateway" with "backend" (the sim directly) in one run.
import type { Comparison, LoadOptions } from '../load.js';

export interface LoadScenario {
  name: string;
  run(options: LoadOptions): Promise<Comparison[]>;
}
