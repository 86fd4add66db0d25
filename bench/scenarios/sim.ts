// The sim itself as the target: non-stream completions and 20-chunk streams, served by
// `rc sim --fast` in its own process (pinned to one core when taskset is available).
import { compare, spawnRc, type LoadRequest } from '../load.js';
import type { LoadScenario } from './scenario.js';

const MODEL = 'bench-model';
const completion = (stream: boolean): LoadRequest => ({
  method: 'POST',
  path: '/v1/chat/completions',
  body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'Hello there, how are you?' }], max_tokens: 20, ignore_eos: true, stream }),
});

export const simScenarios: LoadScenario[] = [
  {
    name: 'sim',
    async run(options) {
      const sim = await spawnRc('sim', ['sim', '--fast', '--port', '0', '--model', MODEL], { cpu: 1 });
      try {
        return [
          await compare({ name: 'sim non-stream (20 tokens)', request: completion(false), targets: [sim], options }),
          await compare({ name: 'sim stream (20 chunks)', request: completion(true), targets: [sim], options }),
        ];
      } finally {
        await sim.stop();
      }
    },
  },
];
