// The real Codex CLI (`codex exec`, @openai/codex) against `rc start`, with its defaults: the
// only settings are what a user of an OpenAI-compatible endpoint writes in config.toml (a
// model provider naming the gateway's base URL, the env var holding the key and the Responses
// wire API) and the model (`-m`); update checks, analytics and feedback are off. Slow suite
// (RC_SLOW_TESTS=1, or RC_CODEX_BIN naming an installed `codex`): see agent-binaries.ts.
import assert from 'node:assert/strict';
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { type AgentPackage, agentBinary, CATALOG_MODELS, jsonLines, runAgent, slowEnabled, startPlatform } from './agent-binaries.js';

const CODEX: AgentPackage = { pkg: '@openai/codex', version: '0.169.0', bin: 'codex', binEnv: 'RC_CODEX_BIN', dirEnv: 'RC_CODEX_DIR' };

/** config.toml: the provider block and nothing a user would not set but the phone-home switches. */
const codexConfig = (gateway: string): string => `model_provider = "rc"
check_for_update_on_startup = false

[model_providers.rc]
name = "rc"
base_url = "${gateway}/v1"
env_key = "RC_API_KEY"
wire_api = "responses"

[analytics]
enabled = false

[feedback]
enabled = false
`;

test('Codex CLI, unmodified and with its defaults, on every catalog model: text answers and a tool round trip', {
  skip: !slowEnabled(CODEX) && 'set RC_SLOW_TESTS=1 (installs @openai/codex)',
  timeout: 900_000,
}, async (t) => {
  const codex = await agentBinary(CODEX);
  const p = await startPlatform(t);
  const home = join(p.dir, 'home');
  const codexHome = join(home, '.codex');
  const work = join(p.dir, 'work');
  mkdirSync(codexHome, { recursive: true });
  mkdirSync(work);
  writeFileSync(join(codexHome, 'config.toml'), codexConfig(p.gateway));
  writeFileSync(join(work, 'notes.txt'), 'The meeting is at noon.\n');
  const env = { HOME: home, CODEX_HOME: codexHome, RC_API_KEY: p.key };

  const exec = async (model: string, prompt: string) => {
    // --skip-git-repo-check: the working dir is not a git repository.
    const r = await runAgent(codex, ['exec', '--skip-git-repo-check', '--json', '-m', model, prompt], { env, cwd: work });
    const events = jsonLines(r.stdout);
    const why = `${r.stdout}\n${r.stderr}`.slice(-4000);
    assert.equal(r.code, 0, why);
    assert.ok(!events.some((e) => e.type === 'error' || e.type === 'turn.failed'), why);
    assert.equal(events.at(-1)?.type, 'turn.completed', why);
    const answer = events.filter((e) => e.type === 'item.completed' && e.item?.type === 'agent_message').at(-1);
    assert.ok(typeof answer?.item.text === 'string' && answer.item.text.length > 0, why);
    return { events, why, thread: events.find((e) => e.type === 'thread.started')?.thread_id as string };
  };

  for (const model of CATALOG_MODELS) {
    await exec(model, 'Say hello in one sentence.');

    // The prompt names Codex's shell tool: the sim calls it, Codex runs it and sends the
    // result back, the sim answers. Codex's session log (rollout) shows the round trip.
    const { thread, why } = await exec(model, 'Use exec_command to list the files here.');
    const items = rollout(codexHome, thread);
    const call = items.findIndex((i) => i.type === 'function_call' && i.name === 'exec_command');
    assert.ok(call >= 0, why);
    const output = items.findIndex((i) => i.type === 'function_call_output' && i.call_id === items[call]!.call_id);
    assert.ok(output > call, 'the tool result went back');
    const rest = items.slice(output + 1);
    assert.ok(
      rest.some((i) => i.type === 'message' && i.role === 'assistant'),
      'a final answer after the result',
    );
    assert.ok(!rest.some((i) => i.type === 'function_call'), 'no second call: the model answered the result');
  }
});

/** The response items of a thread's rollout file (CODEX_HOME/sessions/Y/M/D/rollout-...-<thread>.jsonl). */
function rollout(codexHome: string, thread: string): Record<string, any>[] {
  const dir = join(codexHome, 'sessions');
  const file = readdirSync(dir, { recursive: true, encoding: 'utf8' }).find((f) => f.endsWith(`${thread}.jsonl`));
  assert.ok(file, `no rollout for ${thread}`);
  return jsonLines(readFileSync(join(dir, file), 'utf8'))
    .filter((l) => l.type === 'response_item')
    .map((l) => l.payload as Record<string, any>);
}
