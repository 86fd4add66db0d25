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

test('medianOfRounds: each row is the round of median CPU, each ratio the median of per-round ratios to that round baseline', async () => {
  const { medianOfRounds } = await import('../../bench/scenarios/reference.js');
  const row = (label: string, cpu: number | null, rps = 1) =>
    ({
      label,
      url: '',
      tool: 'wrk',
      connections: 1,
      durationS: 1,
      requests: 1,
      rps,
      p50Ms: 0,
      p99Ms: 0,
      errors: 0,
      cpuUsPerRequest: cpu,
      cpuCores: null,
    }) as const;
  // The gateway's CPU drifts with nginx's: per-round ratios 2, 1.5 and 1.502 (median 1.502), where
  // the medians of the columns (60, 40) would give 1.5 and their means (70, 41.1) 1.70.
  const rounds = [
    [row('gw', 100, 10), row('nginx', 50)],
    [row('gw', 60, 20), row('nginx', 40)],
    [row('gw', 50, 30), row('nginx', 33.3)],
  ];
  const { rows, cpuRatios } = medianOfRounds(rounds);
  assert.deepEqual(
    rows.map((r) => [r.label, r.cpuUsPerRequest, r.rps]),
    [
      ['gw', 60, 20],
      ['nginx', 40, 1],
    ],
  );
  assert.equal(cpuRatios.gw!.toFixed(3), '1.502');
  assert.equal(cpuRatios.nginx, 1);
  // Two rounds: the lower middle row; the ratio the mean of the two ratios. A round without CPU is left out.
  const two = medianOfRounds([rounds[0]!, rounds[1]!, [row('gw', null), row('nginx', 10)]]);
  assert.equal(two.rows[0]!.cpuUsPerRequest, 60);
  assert.equal(two.cpuRatios.gw, 1.75);
  // One round: that round, as before rounds existed.
  const one = medianOfRounds([rounds[0]!]);
  assert.deepEqual(one.rows, rounds[0]);
  assert.equal(one.cpuRatios.gw, 2);
});
