// Every micro-benchmark suite `npm run bench` runs. To add one: import it and list it here.
import type { MicroSuite } from './suite.js';
import { simMicroSuite } from './sim.js';
import { gatesMicroSuite } from '../gates.js';

export const MICRO_SUITES: MicroSuite[] = [simMicroSuite, gatesMicroSuite];
