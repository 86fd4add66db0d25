// Every load scenario `npm run bench` runs. To add one: import it and list it here.
import type { LoadScenario } from './scenario.js';
import { simScenarios } from './sim.js';
import { gatewayScenarios } from './gateway.js';
import { referenceScenarios } from './reference.js';

export const LOAD_SCENARIOS: LoadScenario[] = [...simScenarios, ...gatewayScenarios, ...referenceScenarios];
