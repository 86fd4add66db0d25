// The real opencode (`opencode run`, opencode-ai) against `rc start`, with its defaults: the only
// settings are a provider through @ai-sdk/openai-compatible in opencode.json (base URL, the key
// from an env var, the catalog's models) and the model (`--model rc/<name>`); autoupdate and
// sharing are off, and OPENCODE_DISABLE_MODELS_FETCH skips its models.dev catalogue download
// (offline it would wait 10 s for it). Slow suite (RC_SLOW_TESTS=1, or RC_OPENCODE_BIN naming
// an installed `opencode`): see agent-binaries.ts.
import assert from 'node:assert/strict';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { type AgentPackage, agentBinary, CATALOG_MODELS, jsonLines, runAgent, slowEnabled, startPlatform } from './agent-binaries.js';

const OPENCODE: AgentPackage = { pkg: 'opencode-ai', version: '1.18.33', bin: 'opencode', binEnv: 'RC_OPENCODE_BIN', dirEnv: 'RC_OPENCODE_DIR' };

const opencodeConfig = (gateway: string) => ({
  $schema: 'https://opencode.ai/config.json',
  autoupdate: false,
  share: 'disabled',
  provider: {
    rc: {
      npm: '@ai-sdk/openai-compatible',
      options: { baseURL: `${gateway}/v1`, apiKey: '{env:RC_API_KEY}' },
      models: Object.fromEntries(CATALOG_MODELS.map((m) => [m, {}])),
    },
  },
});

test('opencode, unmodified and with its defaults, on every catalog model: text answers and a tool round trip', {
  skip: !slowEnabled(OPENCODE) && 'set RC_SLOW_TESTS=1 (installs opencode-ai)',
  timeout: 900_000,
}, async (t) => {
  const opencode = await agentBinary(OPENCODE);
  const p = await startPlatform(t);
  const home = join(p.dir, 'home');
  const work = join(p.dir, 'work');
  mkdirSync(join(home, '.config', 'opencode'), { recursive: true });
  mkdirSync(work);
  writeFileSync(join(home, '.config', 'opencode', 'opencode.json'), JSON.stringify(opencodeConfig(p.gateway)));
  writeFileSync(join(work, 'notes.txt'), 'The meeting is at noon.\n');
  const env = { HOME: home, RC_API_KEY: p.key, OPENCODE_DISABLE_MODELS_FETCH: '1' };

  const ask = async (model: string, prompt: string) => {
    const r = await runAgent(opencode, ['run', '--model', `rc/${model}`, '--format', 'json', prompt], { env, cwd: work });
    const events = jsonLines(r.stdout);
    const why = `${r.stdout}\n${r.stderr}`.slice(-4000);
    assert.equal(r.code, 0, why);
    assert.ok(!events.some((e) => e.type === 'error'), why);
    const last = events.at(-1);
    assert.ok(last?.type === 'step_finish' && last.part?.reason === 'stop', why);
    return { events, why };
  };
  const isText = (e: Record<string, any>) => e.type === 'text' && typeof e.part?.text === 'string' && e.part.text.length > 0;

  for (const model of CATALOG_MODELS) {
    const hello = await ask(model, 'Say hello in one sentence.');
    assert.ok(hello.events.some(isText), hello.why);
    assert.ok(!hello.events.some((e) => e.type === 'tool_use'), hello.why);

    // The prompt names its file reading tool: the sim calls it, opencode runs it and sends the
    // result back, the sim answers (the result may be an error: the arguments are made up).
    const { events, why } = await ask(model, 'Use read on notes.txt.');
    const calls = events.filter((e) => e.type === 'tool_use');
    assert.equal(calls.length, 1, why);
    assert.equal(calls[0]!.part.tool, 'read');
    assert.ok(['completed', 'error'].includes(calls[0]!.part.state?.status), 'the tool ran and has a result');
    assert.ok(events.slice(events.indexOf(calls[0]!) + 1).some(isText), 'a final answer after the result');
  }
});
