// The real Claude Code binary (`claude -p`) against `rc start` (what `npm start` runs), with its
// default settings: only ANTHROPIC_BASE_URL, ANTHROPIC_API_KEY and ANTHROPIC_MODEL are set.
// Slow (it installs a ~370 MB package on first use), so it runs only with RC_SLOW_TESTS=1
// (.ci/run sets it) or when RC_CLAUDE_CODE_BIN points at an installed `claude`. The package is
// installed with npm into RC_CLAUDE_CODE_DIR (default: <tmpdir>/rc-claude-code-<version>) and
// reused. The binary reaches nothing but the gateway: every other host is unreachable in CI, and
// it runs headless with a throw-away HOME.
import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { waitFor, platformTestEnv } from '../helpers.js';

const CLAUDE_CODE_VERSION = '2.1.330';
const RC = fileURLToPath(new URL('../../bin/rc.js', import.meta.url));
const run = promisify(execFile);
const enabled = process.env.RC_SLOW_TESTS === '1' || !!process.env.RC_CLAUDE_CODE_BIN;

async function claudeBinary(): Promise<string> {
  if (process.env.RC_CLAUDE_CODE_BIN) return process.env.RC_CLAUDE_CODE_BIN;
  const dir = process.env.RC_CLAUDE_CODE_DIR || join(tmpdir(), `rc-claude-code-${CLAUDE_CODE_VERSION}`);
  const bin = join(dir, 'node_modules', '.bin', 'claude');
  if (!existsSync(bin)) {
    await run('npm', ['install', '--prefix', dir, '--no-audit', '--no-fund', '--no-save', `@anthropic-ai/claude-code@${CLAUDE_CODE_VERSION}`], {
      timeout: 600_000,
    });
  }
  return bin;
}

interface ClaudeResult {
  is_error: boolean;
  result: string;
  num_turns: number;
  usage: { input_tokens: number; cache_read_input_tokens: number; output_tokens: number };
}

test('Claude Code, unmodified and with its defaults, on both models of the default catalog', {
  skip: !enabled && 'set RC_SLOW_TESTS=1 (installs @anthropic-ai/claude-code)',
  timeout: 900_000,
}, async (t) => {
  const claude = await claudeBinary();
  const dataDir = mkdtempSync(join(tmpdir(), 'rc-claude-code-'));
  const home = join(dataDir, 'home');
  const env = {
    ...process.env,
    ...platformTestEnv(dataDir),
    RC_LOG_LEVEL: 'warn',
  };
  const platform = spawn(process.execPath, [RC, 'start'], { env, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  platform.stdout.on('data', (d: Buffer) => (out += d));
  t.after(() => {
    platform.kill('SIGTERM');
    rmSync(dataDir, { recursive: true, force: true });
    rmSync(`${dataDir}-instances`, { recursive: true, force: true });
  });
  await waitFor(() => /sim backend .*sim-reasoner/.test(out) || platform.exitCode !== null, 60_000);
  const gateway = /model gateway\s+(http:\/\/\S+)\/v1/.exec(out)?.[1];
  const api = /platform API\s+(http:\/\/\S+)\/api/.exec(out)?.[1];
  assert.ok(gateway && api, out);
  const { stdout } = await run(process.execPath, [RC, 'account', 'create', '--email', 'agent@example.com', '--verified'], { env });
  const key = (JSON.parse(stdout) as { api_token: string }).api_token;

  const ask = async (model: string, prompt: string, extra: string[] = []): Promise<ClaudeResult> => {
    const agentEnv = { PATH: process.env.PATH ?? '', HOME: home, ANTHROPIC_BASE_URL: `${gateway}/api`, ANTHROPIC_API_KEY: key, ANTHROPIC_MODEL: model };
    const r = await run(claude, ['-p', prompt, '--output-format', 'json', ...extra], {
      env: agentEnv,
      cwd: dataDir,
      timeout: 180_000,
      maxBuffer: 16 * 1024 * 1024,
    });
    return JSON.parse(r.stdout) as ClaudeResult;
  };

  for (const model of ['sim-chat', 'sim-reasoner']) {
    const first = await ask(model, 'Say hello in one sentence.');
    assert.equal(first.is_error, false, JSON.stringify(first));
    assert.ok(first.result.length > 0);
    // Its system prompt and tools come again: the backend's prefix cache shows as cache reads.
    const second = await ask(model, 'Say goodbye in one sentence.');
    assert.equal(second.is_error, false, JSON.stringify(second));
    assert.ok(second.usage.cache_read_input_tokens > 0, JSON.stringify(second.usage));
  }

  // Tools: the sim calls a tool the prompt names; the agent runs it and sends the result back.
  const before = await modelRequests(api, key, 'sim-chat');
  await ask('sim-chat', 'Use the Read tool on notes.txt.', ['--allowedTools', 'Read', '--max-turns', '3']).catch(() => undefined);
  assert.ok((await modelRequests(api, key, 'sim-chat')) - before >= 2, 'a tool round trip reached the gateway');
});

async function modelRequests(api: string, key: string, model: string): Promise<number> {
  const r = await fetch(`${api}/api/profile/model-usage`, { headers: { authorization: `Bearer ${key}` } });
  const body = (await r.json()) as { by_model: Record<string, { requests: number }> };
  return body.by_model[model]?.requests ?? 0;
}
