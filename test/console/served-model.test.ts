// The model name the instance page's dedicated-endpoint snippet uses (status `served_model`,
// control-plane/instances/views.ts): read from the vllm or sglang start command.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { servedModel } from '../../control-plane/instances/views.js';
import type { TemplateSnapshot } from '../../control-plane/instances/store.js';

const snap = (instance_type: string, start_command: string | null) => ({ instance_type, start_command }) as TemplateSnapshot;

test('served_model: --served-model-name first, then --model, --model-path, vllm serve <model>; null otherwise', () => {
  const cases: [string, string | null, string | null][] = [
    ['vllm', 'vllm serve Qwen/Qwen3-8B --served-model-name qwen3-8b --host 0.0.0.0 --port $PORT', 'qwen3-8b'],
    ['vllm', 'vllm serve Qwen/Qwen3-8B --served-model-name=a b --port $PORT', 'a'],
    ['vllm', 'vllm serve Qwen/Qwen3-8B --port $PORT', 'Qwen/Qwen3-8B'],
    ['vllm', 'rc sim --host 0.0.0.0 --port $PORT --model demo', 'demo'],
    ['sglang', 'python3 -m sglang.launch_server --model-path Qwen/Qwen3-8B --port $PORT', 'Qwen/Qwen3-8B'],
    ['sglang', 'python3 -m sglang.launch_server --model-path Qwen/Qwen3-8B --served-model-name "qwen"', 'qwen'],
    ['vllm', './start.sh', null],
    ['vllm', null, null],
    ['gradio', 'python3 app.py --model demo', null],
  ];
  for (const [type, cmd, want] of cases) assert.equal(servedModel(snap(type, cmd)), want, `${type}: ${cmd}`);
});
