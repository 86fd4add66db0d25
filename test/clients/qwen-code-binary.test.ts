// The real Qwen Code (`qwen -p`, @qwen-code/qwen-code) against `rc start`, with its defaults:
// the only settings are OPENAI_BASE_URL, OPENAI_API_KEY and OPENAI_MODEL (what its docs give
// for an OpenAI-compatible endpoint); settings.json turns off update checks, usage statistics
// and telemetry. Slow suite (RC_SLOW_TESTS=1, or RC_QWEN_CODE_BIN naming an installed `qwen`):
// see agent-binaries.ts.
import assert from 'node:assert/strict';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { type AgentPackage, agentBinary, CATALOG_MODELS, runAgent, slowEnabled, startPlatform } from './agent-binaries.js';

const QWEN: AgentPackage = { pkg: '@qwen-code/qwen-code', version: '0.24.4', bin: 'qwen', binEnv: 'RC_QWEN_CODE_BIN', dirEnv: 'RC_QWEN_CODE_DIR' };

const SETTINGS = { general: { enableAutoUpdate: false }, privacy: { usageStatisticsEnabled: false }, telemetry: { enabled: false } };

/** One message of `--output-format json` (an array of stream-json messages). */
interface QwenMessage {
  type: string;
  subtype?: string;
  is_error?: boolean;
  result?: string;
  message?: { content?: { type: string; id?: string; tool_use_id?: string; name?: string; text?: string }[] };
}

test('Qwen Code, unmodified and with its defaults, on every catalog model: text answers and a tool round trip', {
  skip: !slowEnabled(QWEN) && 'set RC_SLOW_TESTS=1 (installs @qwen-code/qwen-code)',
  timeout: 900_000,
}, async (t) => {
  const qwen = await agentBinary(QWEN);
  const p = await startPlatform(t);
  const home = join(p.dir, 'home');
  const work = join(p.dir, 'work');
  mkdirSync(join(home, '.qwen'), { recursive: true });
  mkdirSync(work);
  writeFileSync(join(home, '.qwen', 'settings.json'), JSON.stringify(SETTINGS));
  writeFileSync(join(work, 'notes.txt'), 'The meeting is at noon.\n');

  const ask = async (model: string, prompt: string) => {
    const env = { HOME: home, OPENAI_BASE_URL: `${p.gateway}/v1`, OPENAI_API_KEY: p.key, OPENAI_MODEL: model };
    const r = await runAgent(qwen, ['-p', prompt, '--output-format', 'json'], { env, cwd: work });
    const why = `${r.stdout}\n${r.stderr}`.slice(-4000);
    assert.equal(r.code, 0, why);
    const messages = JSON.parse(r.stdout) as QwenMessage[];
    const result = messages.at(-1);
    assert.equal(result?.type, 'result', why);
    assert.equal(result.subtype, 'success', why);
    assert.equal(result.is_error, false, why);
    assert.ok(typeof result.result === 'string' && result.result.length > 0, why);
    return { messages, why };
  };

  for (const model of CATALOG_MODELS) {
    // Qwen Code's user message carries <system-reminder> blocks naming its tools (an agent, ...):
    // the sim answers the words of the prompt, with text.
    const hello = await ask(model, 'Say hello in one sentence.');
    assert.ok(!hello.messages.some((m) => m.message?.content?.some((c) => c.type === 'tool_use')), hello.why);

    // The prompt names its file reading tool: the sim calls it, Qwen Code runs it and sends the
    // result back, the sim answers (the result itself may be an error: the arguments are made up).
    const { messages, why } = await ask(model, 'Use read_file on notes.txt.');
    const blocks = messages.flatMap((m) => m.message?.content ?? []);
    const call = blocks.findIndex((c) => c.type === 'tool_use' && c.name === 'read_file');
    assert.ok(call >= 0, why);
    const result = blocks.findIndex((c) => c.type === 'tool_result' && c.tool_use_id === blocks[call]!.id);
    assert.ok(result > call, 'the tool result went back');
    const rest = blocks.slice(result + 1);
    assert.ok(
      rest.some((c) => c.type === 'text' && !!c.text),
      'a final answer after the result',
    );
    assert.ok(!rest.some((c) => c.type === 'tool_use'), 'no second call: the model answered the result');
  }
});
