// `rc sim` as a child process: prints its URL, serves, exits 0 on SIGTERM; bad options exit 2.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import OpenAI from 'openai';
import { firstLine } from '../helpers.js';

const RC = fileURLToPath(new URL('../../bin/rc.js', import.meta.url));
const env = { ...process.env, RC_LOG_LEVEL: 'silent' };

test('rc sim: prints its URL as JSON, serves, exits 0 on SIGTERM', async (t) => {
  const child = spawn(process.execPath, [RC, 'sim', '--port', '0', '--model', 'cli-model', '--fast', '--reasoning', '--seed', '5'], {
    env,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  t.after(() => {
    if (child.exitCode === null) child.kill('SIGKILL');
  });
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  const info = JSON.parse(await firstLine(child, 'rc sim')) as { url: string; model: string; pid: number };
  assert.equal(info.model, 'cli-model');
  assert.match(info.url, /^http:\/\/127\.0\.0\.1:\d+$/);
  assert.equal(info.pid, child.pid);
  const client = new OpenAI({ baseURL: `${info.url}/v1`, apiKey: 'x', maxRetries: 0 });
  const r = await client.chat.completions.create({ model: 'cli-model', messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 });
  assert.equal(r.model, 'cli-model');
  assert.equal(r.usage!.completion_tokens, 4);
  assert.ok((r.choices[0]!.message as any).reasoning, '--reasoning took effect');
  child.kill('SIGTERM');
  assert.equal(await exited, 0);
});

test('rc sim: bad options exit 2 with a clear message; --help exits 0', () => {
  const run = (...args: string[]) => spawnSync(process.execPath, [RC, 'sim', ...args], { env, encoding: 'utf8', timeout: 20_000 });
  const cases: [string[], RegExp][] = [
    [['--port', 'abc', '--model', 'm'], /--port must be an integer/],
    [['--port', '70000', '--model', 'm'], /--port must be at most 65535/],
    [['--port', '0'], /--model is required/],
    [['--model', 'm', '--bogus'], /Unknown option/i],
    [['--model', 'm', '--tokens-per-second', '0'], /--tokens-per-second must be > 0/],
    [['--model', 'm', '--prefill-tokens-per-second', '0'], /--prefill-tokens-per-second must be > 0/],
    [['--model', 'm', '--max-num-seqs', '0'], /--max-num-seqs must be an integer >= 1/],
    [['--model', 'm', '--kv-cache-blocks', '1.5'], /--kv-cache-blocks must be an integer/],
    [['--model', 'm', '--ttft-ms=-1'], /--ttft-ms must be a number >= 0/],
    [['--model', 'm', '--fault', 'explode'], /--fault: unknown fault/],
  ];
  for (const [args, message] of cases) {
    const r = run(...args);
    assert.equal(r.status, 2, `${args.join(' ')}: ${r.stderr}`);
    assert.match(r.stderr, message);
  }
  const help = run('--help');
  assert.equal(help.status, 0);
  assert.match(help.stdout, /Usage: rc sim --model NAME/);
});
