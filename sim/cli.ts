// `rc sim`: runs the simulated serving backend in the foreground until SIGINT/SIGTERM.
// Prints one JSON line on stdout once listening: {"url": ..., "model": ..., "pid": ...}.
import { closeOnSignal, numberOption, parse, untilSignal, UsageError, type Command, portOption } from '../lib/cli.js';
import { createLogger } from '../lib/log.js';
import { FAULT_KINDS, parseFault } from './faults.js';
import { SIM_FLAVOURS, type SimFlavour } from './options.js';

const HELP = `Usage: rc sim --model NAME [options]

Runs a simulated OpenAI-compatible serving backend that behaves like vLLM (or, with --flavour,
like another server, byte for byte).

Options:
  --model NAME               served model name, echoed as "model" (required)
  --flavour NAME             the server to speak as: ${SIM_FLAVOURS.join(', ')} (default vllm: current vLLM)
  --prompt-tokens-details    report cached prompt tokens (vLLM --enable-prompt-tokens-details, SGLang --enable-cache-report)
  --metrics                  serve /metrics on SGLang and llama.cpp (their --enable-metrics / --metrics; vLLM always does)
  --no-tcp-nodelay           keep Nagle's algorithm on towards clients (a node:net relay in front of the server)
  --host H                   address to bind (default 127.0.0.1)
  --port P                   port (default 8000; 0 picks a free one)
  --reasoning                emit reasoning before the answer
  --fast                     no delays at all (benchmarks)
  --ttft-ms N                time to first token in ms (default 80)
  --tokens-per-second N      output pace (default 50)
  --seed N                   default seed (a request's "seed" overrides it)
  --max-model-len N          context window in tokens (default 32768)
  --no-prefix-caching        report no cached prompt tokens (prefix caching off)
  --block-size N             KV cache block size in tokens (default 16)
  --kv-cache-blocks N        KV cache capacity in blocks (default 27648: an 8B model on one 80 GB GPU)
  --prefill-tokens-per-second N
                             prefill pace: uncached prompt tokens add N/s to the time to first token (default 8000)
  --max-num-seqs N           requests running at once; the rest wait, first come first served (default 256)
  --fault KIND[;k=v]         standing fault: ${FAULT_KINDS.join(', ')}
                             (e.g. "429;retry-after=2", "close-mid-stream;after=5", "500;count=3")
  -h, --help                 this help

Prints {"url","model","pid"} as one JSON line on stdout when ready; SIGINT/SIGTERM stop it.
`;

export const simCommand: Command = {
  summary: 'Run the simulated OpenAI-compatible serving backend',
  async run(argv) {
    const { values } = parse(argv, {
      model: { type: 'string' },
      host: { type: 'string' },
      port: { type: 'string' },
      reasoning: { type: 'boolean' },
      fast: { type: 'boolean' },
      'ttft-ms': { type: 'string' },
      'tokens-per-second': { type: 'string' },
      seed: { type: 'string' },
      'max-model-len': { type: 'string' },
      'no-prefix-caching': { type: 'boolean' },
      'block-size': { type: 'string' },
      'kv-cache-blocks': { type: 'string' },
      'prefill-tokens-per-second': { type: 'string' },
      'max-num-seqs': { type: 'string' },
      fault: { type: 'string' },
      flavour: { type: 'string' },
      'prompt-tokens-details': { type: 'boolean' },
      metrics: { type: 'boolean' },
      'no-tcp-nodelay': { type: 'boolean' },
    });
    if (values.help) {
      process.stdout.write(HELP);
      return 0;
    }
    if (!values.model) throw new UsageError('--model is required');
    if (values.host === '') throw new UsageError('--host must not be empty');
    const port = portOption(values.port) ?? 8000;
    const tokensPerSecond = positiveNumber('tokens-per-second', values['tokens-per-second']);
    const fault = values.fault === undefined ? undefined : parseFault(values.fault);
    if (values.fault !== undefined && !fault) throw new UsageError(`--fault: unknown fault ${JSON.stringify(values.fault)} (kinds: ${FAULT_KINDS.join(', ')})`);

    const flavour = values.flavour;
    if (flavour !== undefined && !(SIM_FLAVOURS as readonly string[]).includes(flavour)) {
      throw new UsageError(`--flavour: unknown flavour ${JSON.stringify(flavour)} (flavours: ${SIM_FLAVOURS.join(', ')})`);
    }

    const options = {
      flavour: flavour as SimFlavour | undefined,
      promptTokensDetails: values['prompt-tokens-details'] ?? false,
      metrics: values.metrics ? true : undefined,
      noDelay: values['no-tcp-nodelay'] ? false : undefined,
      host: values.host ?? '127.0.0.1',
      port,
      model: values.model,
      reasoning: values.reasoning ?? false,
      fast: values.fast ?? false,
      ttftMs: numberOption('ttft-ms', values['ttft-ms'], { min: 0 }),
      tokensPerSecond,
      seed: numberOption('seed', values.seed, { integer: true }),
      maxModelLen: numberOption('max-model-len', values['max-model-len'], { integer: true, min: 1 }),
      prefixCaching: !values['no-prefix-caching'],
      blockSize: numberOption('block-size', values['block-size'], { integer: true, min: 1 }),
      kvCacheBlocks: numberOption('kv-cache-blocks', values['kv-cache-blocks'], { integer: true, min: 1 }),
      prefillTokensPerSecond: positiveNumber('prefill-tokens-per-second', values['prefill-tokens-per-second']),
      maxNumSeqs: numberOption('max-num-seqs', values['max-num-seqs'], { integer: true, min: 1 }),
      fault,
    };

    const { startSim } = await import('./server.js');
    const signal = untilSignal(); // listen for signals before announcing readiness
    const server = await startSim(options);
    process.stdout.write(JSON.stringify({ url: server.url, model: server.model, pid: process.pid }) + '\n');
    // The sim has no settings of its own: only a shutdown that goes wrong is logged.
    return closeOnSignal(() => server.close(1000), createLogger('warn', { part: 'sim' }), { signal });
  },
};

/** A rate flag: a number > 0 (a pace of 0 would never finish). */
function positiveNumber(name: string, value: string | undefined): number | undefined {
  const n = numberOption(name, value, { min: 0 });
  if (n === 0) throw new UsageError(`--${name} must be > 0`);
  return n;
}
