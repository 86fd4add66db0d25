// The real Claude Code binary (`claude -p`) against `rc start` (what `npm start` runs), with its
// default settings: only ANTHROPIC_BASE_URL, ANTHROPIC_API_KEY and ANTHROPIC_MODEL are set.
// Slow (it installs a ~370 MB package on first use), so it runs only with RC_SLOW_TESTS=1
// (.ci/run sets it) or when RC_CLAUDE_CODE_BIN points at an installed `claude`. The package is
// installed with npm into RC_CLAUDE_CODE_DIR (default: <tmpdir>/rc-claude-<version>) and
// reused. The binary reaches nothing but the gateway: every other host is unreachable in CI, and
// it runs headless with a throw-away HOME (agent-binaries.ts).
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { test } from 'node:test';
import { type AgentPackage, agentBinary, CATALOG_MODELS, modelRequests, runAgent, slowEnabled, startPlatform } from './agent-binaries.js';

const CLAUDE_CODE: AgentPackage = {
  pkg: '@anthropic-ai/claude-code',
  version: '2.1.330',
  bin: 'claude',
  binEnv: 'RC_CLAUDE_CODE_BIN',
  dirEnv: 'RC_CLAUDE_CODE_DIR',
};

interface ClaudeResult {
  is_error: boolean;
  result: string;
  num_turns: number;
  usage: { input_tokens: number; cache_read_input_tokens: number; output_tokens: number };
}

test('Claude Code, unmodified and with its defaults, on both models of the default catalog', {
  skip: !slowEnabled(CLAUDE_CODE) && 'set RC_SLOW_TESTS=1 (installs @anthropic-ai/claude-code)',
  timeout: 900_000,
}, async (t) => {
  const claude = await agentBinary(CLAUDE_CODE);
  const p = await startPlatform(t);
  const home = join(p.dir, 'home');

  const ask = async (model: string, prompt: string, extra: string[] = []): Promise<ClaudeResult> => {
    const env = { HOME: home, ANTHROPIC_BASE_URL: `${p.gateway}/api`, ANTHROPIC_API_KEY: p.key, ANTHROPIC_MODEL: model };
    const r = await runAgent(claude, ['-p', prompt, '--output-format', 'json', ...extra], { env, cwd: p.dir, timeoutMs: 180_000 });
    assert.equal(r.code, 0, `${r.stdout}\n${r.stderr}`.slice(-4000));
    return JSON.parse(r.stdout) as ClaudeResult;
  };

  for (const model of CATALOG_MODELS) {
    const first = await ask(model, 'Say hello in one sentence.');
    assert.equal(first.is_error, false, JSON.stringify(first));
    assert.ok(first.result.length > 0);
    // Its system prompt and tools come again: the backend's prefix cache shows as cache reads.
    const second = await ask(model, 'Say goodbye in one sentence.');
    assert.equal(second.is_error, false, JSON.stringify(second));
    assert.ok(second.usage.cache_read_input_tokens > 0, JSON.stringify(second.usage));
  }

  // Tools: the sim calls a tool the prompt names; the agent runs it and sends the result back,
  // and the sim answers it in text (the run ends within its turns, not at the limit).
  const before = await modelRequests(p, 'sim-chat');
  const tool = await ask('sim-chat', 'Use the Read tool on notes.txt.', ['--allowedTools', 'Read', '--max-turns', '3']);
  assert.equal(tool.is_error, false, JSON.stringify(tool));
  assert.ok(tool.num_turns >= 2, JSON.stringify(tool));
  assert.ok((await modelRequests(p, 'sim-chat')) - before >= 2, 'a tool round trip reached the gateway');
});
