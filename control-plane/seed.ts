// First-start seed: a default image catalog and a few public platform templates. Runs once per
// database (recorded in the meta table), so an operator's later edits are never undone.
import type { Repositories } from './store.js';
import { templateInputSchema } from './templates.js';

export const DEFAULT_IMAGES: readonly { name: string; image: string }[] = [
  { name: 'Jupyter (PyTorch)', image: 'rc/jupyter-pytorch:latest' },
  { name: 'Gradio', image: 'rc/gradio:latest' },
  { name: 'Streamlit', image: 'rc/streamlit:latest' },
  { name: 'ComfyUI', image: 'rc/comfyui:latest' },
  { name: 'vLLM', image: 'vllm/vllm-openai:latest' },
  { name: 'vLLM demo (simulated backend)', image: 'rc/vllm-sim:latest' },
  { name: 'SGLang', image: 'lmsysorg/sglang:latest' },
];

/**
 * The demo endpoint's command: `rc` is on every instance's PATH (the agent's toolbox in
 * containers, a wrapper in the process runtime), and a dedicated endpoint binds 0.0.0.0 (SPEC).
 */
const SIM_COMMAND = 'rc sim --host 0.0.0.0 --port $PORT --model demo';

/**
 * The Gradio demo's command: the app's own directory only (/app in the image; a fresh ./app where
 * there is none, as in the process runtime), never the working directory or /: an app port must
 * not serve /proc (a process's environment), /etc or the instance files.
 */
export const GRADIO_DEMO_COMMAND = `cd /app 2>/dev/null || { mkdir -p app && cd app && echo '<h1>Gradio demo</h1>' > index.html; }; exec python3 -m http.server $PORT`;

/**
 * The real serving stacks' commands, with what the gateway needs of them (README "Model backends:
 * what to run"): tool calls, reasoning, cached-token reporting and metrics. Qwen3-8B: its tool
 * parser is hermes on vLLM and qwen25 on SGLang, its reasoning parser qwen3 on both.
 */
export const VLLM_QWEN3_COMMAND =
  'vllm serve Qwen/Qwen3-8B --served-model-name qwen3-8b --host 0.0.0.0 --port $PORT --max-model-len 32768 ' +
  '--enable-auto-tool-choice --tool-call-parser hermes --reasoning-parser qwen3 --enable-prompt-tokens-details';
export const SGLANG_QWEN3_COMMAND =
  'python3 -m sglang.launch_server --model-path Qwen/Qwen3-8B --served-model-name qwen3-8b --host 0.0.0.0 --port $PORT ' +
  '--context-length 32768 --tool-call-parser qwen25 --reasoning-parser qwen3 --enable-cache-report --enable-metrics';

export async function seedOnce(store: Repositories): Promise<void> {
  await store.transaction(async (tx) => {
    if (await tx.sql.prepare("SELECT 1 FROM meta WHERE key = 'seeded'").get()) return;
    for (const i of DEFAULT_IMAGES) await tx.images.add(i.name, i.image);
    const seed = (t: Record<string, unknown>) => tx.templates.create(null, templateInputSchema.parse({ enabled: true, ...t }), true);
    await seed({
      title: 'Jupyter notebook',
      slug: 'jupyter',
      image: 'rc/jupyter-pytorch:latest',
      instance_type: 'jupyter',
      category: 'notebooks',
      description: 'A JupyterLab environment with PyTorch.',
      tags: ['notebook'],
      sort_order: 10,
    });
    await seed({
      title: 'Gradio demo',
      slug: 'gradio-demo',
      image: 'rc/gradio:latest',
      instance_type: 'gradio',
      app_port: 7860,
      category: 'apps',
      description: 'A tiny web app on the routed Gradio port.',
      tags: ['demo'],
      start_command: GRADIO_DEMO_COMMAND,
      sort_order: 20,
    });
    await seed({
      title: 'vLLM dedicated endpoint (demo model)',
      slug: 'vllm-demo',
      image: 'rc/vllm-sim:latest',
      instance_type: 'vllm',
      app_port: 8000,
      category: 'serving',
      description: 'An OpenAI-compatible endpoint serving the model "demo" (simulated backend).',
      tags: ['llm', 'demo'],
      start_command: SIM_COMMAND,
      sort_order: 30,
    });
    await seed({
      title: 'vLLM: Qwen3-8B',
      slug: 'vllm-qwen3',
      image: 'vllm/vllm-openai:latest',
      instance_type: 'vllm',
      app_port: 8000,
      category: 'serving',
      description: 'vLLM serving Qwen3-8B with tool calls, reasoning, cached-token reporting and metrics on (needs a GPU and the image).',
      tags: ['llm'],
      start_command: VLLM_QWEN3_COMMAND,
      sort_order: 40,
    });
    await seed({
      title: 'SGLang: Qwen3-8B',
      slug: 'sglang-qwen3',
      image: 'lmsysorg/sglang:latest',
      instance_type: 'sglang',
      app_port: 30000,
      category: 'serving',
      description: 'SGLang serving Qwen3-8B with tool calls, reasoning, cached-token reporting and metrics on (needs a GPU and the image).',
      tags: ['llm'],
      start_command: SGLANG_QWEN3_COMMAND,
      sort_order: 50,
    });
    await tx.sql.prepare("INSERT INTO meta (key, value) VALUES ('seeded', ?)").run(new Date(store.clock.now()).toISOString());
  });
}
