// The load harness against a real `rc sim` child: short runs, no timing asserted.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { compare, hasWrk, printComparisons, processCpuUs, spawnRc, type LoadTool } from '../../bench/load.js';

test('processCpuUs reads this process CPU time; null for a missing pid', () => {
  const a = processCpuUs(process.pid);
  if (a === null) return; // no /proc here
  let x = 0;
  for (let i = 0; i < 2e6; i++) x += i;
  assert.ok(x > 0);
  assert.ok(processCpuUs(process.pid)! >= a);
  assert.equal(processCpuUs(2 ** 22 + 12345), null);
});

const tools: LoadTool[] = hasWrk() ? ['autocannon', 'wrk'] : ['autocannon'];
for (const tool of tools) {
  test(`compare with ${tool}: two targets, rows, ratios, CPU per request`, async (t) => {
    const sim = await spawnRc('sim', ['sim', '--fast', '--port', '0', '--model', 'b'], { env: { RC_LOG_LEVEL: 'silent' } });
    t.after(() => sim.stop());
    const request = {
      method: 'POST' as const,
      path: '/v1/chat/completions',
      body: JSON.stringify({ model: 'b', messages: [{ role: 'user', content: 'x' }], max_tokens: 5 }),
    };
    const c = await compare({
      name: 'test',
      request,
      targets: [
        { ...sim, label: 'a' },
        { ...sim, label: 'b' },
      ],
      options: { durationS: 1, warmupS: 0, connections: 2, tool },
    });
    assert.equal(c.baseline, 'b');
    assert.equal(c.results.length, 2);
    for (const r of c.results) {
      assert.equal(r.tool, tool);
      assert.ok(r.requests > 0);
      assert.equal(r.errors, 0);
      assert.ok(r.p99Ms >= r.p50Ms);
      if (r.cpuUsPerRequest !== null) assert.ok(r.cpuUsPerRequest > 0);
    }
    assert.equal(c.ratios.b, 1);
    let out = '';
    printComparisons([c], (s) => {
      out += s;
    });
    assert.match(out, /req\/s/);
    assert.equal(out.trim().split('\n').length, 4);

    // A bad model makes every response a 404: the harness must count them as errors.
    const bad = await compare({
      name: 'bad',
      request: { ...request, body: JSON.stringify({ model: 'nope', messages: [{ role: 'user', content: 'x' }] }) },
      targets: [sim],
      options: { durationS: 1, warmupS: 0, connections: 2, tool },
    });
    assert.ok(bad.results[0]!.errors > 0);
  });
}
