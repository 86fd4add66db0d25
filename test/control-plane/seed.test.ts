// The seeded templates of the real serving stacks start their servers with what the gateway needs
// of them (README "Model backends: what to run"): tool calls, reasoning, cached tokens, metrics.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { openDatabase } from '../../control-plane/db.js';
import { Store } from '../../control-plane/store.js';

/** The flags README's table names for each stack, which its seeded template must pass. */
const NEEDED: Record<string, { slug: string; flags: string[] }> = {
  vllm: {
    slug: 'vllm-qwen3',
    flags: ['--enable-auto-tool-choice', '--tool-call-parser', '--reasoning-parser', '--enable-prompt-tokens-details', '--max-model-len'],
  },
  sglang: { slug: 'sglang-qwen3', flags: ['--tool-call-parser', '--reasoning-parser', '--enable-cache-report', '--enable-metrics', '--context-length'] },
};

test('the seeded vLLM and SGLang templates start with the flags the gateway needs, bound to 0.0.0.0:$PORT on their routed port', async () => {
  const store = await Store.open({ db: openDatabase(':memory:') });
  try {
    const seeded = await store.templates.listPublic();
    for (const [type, { slug, flags }] of Object.entries(NEEDED)) {
      const t = seeded.find((x) => x.slug === slug);
      assert.ok(t, `seeded ${slug}`);
      assert.equal(t.instance_type, type);
      const command = t.start_command ?? '';
      for (const flag of [...flags, '--host 0.0.0.0', '--port $PORT']) assert.ok(command.includes(flag), `${slug}: ${flag} in ${command}`);
      assert.equal(t.app_port, type === 'vllm' ? 8000 : 30000);
    }
  } finally {
    await store.close();
  }
});

test("README's backend table names every flag the seeded templates rely on", () => {
  const readme = readFileSync(new URL('../../../README.md', import.meta.url), 'utf8');
  const section = readme.split('## Model backends: what to run')[1]?.split('\n## ')[0] ?? '';
  assert.ok(section, 'README has the section');
  for (const { flags } of Object.values(NEEDED)) for (const flag of flags) assert.ok(section.includes(flag), `README names ${flag}`);
});
