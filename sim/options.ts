// What startSim accepts (and `rc sim` builds from its flags): where to listen, the served model,
// its pace, its engine (KV cache, prefix caching, batch) and a standing fault.
import { z } from 'zod';
import type { Logger } from '../lib/log.js';
import type { Fault } from './faults.js';

/**
 * Which real server the sim speaks as, byte for byte (sim/flavours/, sim/README.md "Flavours"):
 * vLLM 0.10.1 (0.10.1 only: 0.10.2 adds token_ids), 0.11.1 (0.11.1 to 0.15), current main,
 * SGLang 0.5.x and current main, and llama.cpp's llama-server.
 */
export const SIM_FLAVOURS = ['vllm-0.10.1', 'vllm-0.11.1', 'vllm', 'sglang-0.5', 'sglang', 'llama.cpp'] as const;
export type SimFlavour = (typeof SIM_FLAVOURS)[number];

export const simOptionsSchema = z.object({
  host: z.string().min(1).default('127.0.0.1'),
  port: z.number().int().min(0).max(65535).default(0),
  /** The served model name, echoed as `model`. */
  model: z.string().min(1).max(256).default('sim'),
  /** Emit reasoning before the answer. */
  reasoning: z.boolean().default(false),
  /** Context window (prompt + output tokens). */
  maxModelLen: z.number().int().positive().default(32768),
  /** Time to first token. */
  ttftMs: z.number().min(0).default(80),
  /** Output pace after the first token. */
  tokensPerSecond: z.number().positive().default(50),
  /** No delays at all (benchmarks). */
  fast: z.boolean().default(false),
  /** Default seed (a request's `seed` overrides it). */
  seed: z.number().int().default(0),
  /** Largest request body (413 beyond). */
  maxBodyBytes: z
    .number()
    .int()
    .positive()
    .default(8 * 1024 * 1024),
  /** Model vLLM's automatic prefix caching: repeated prompt prefixes are reported as cached_tokens. */
  prefixCaching: z.boolean().default(true),
  /** KV cache block size in tokens (vLLM's default: 16): cached tokens come in whole blocks. */
  blockSize: z.number().int().positive().default(16),
  /**
   * KV cache capacity in blocks. Default: an 8B model (Llama 3 8B: 32 layers x 8 KV heads x 128
   * dims x 2 (K, V) x 2 bytes = 128 KiB per token) on one 80 GB GPU at vLLM's 0.9 memory
   * utilisation, less ~16 GiB of weights and ~2 GiB of activations: ~54 GiB, 442,368 tokens.
   */
  kvCacheBlocks: z.number().int().positive().default(27_648),
  /**
   * Prefill speed: the prompt tokens not served from the prefix cache add
   * uncached / prefillTokensPerSecond s to the time to first token. Default: an 8B model on one
   * A100 (2 x 8e9 FLOP per token at ~40% of 312 bf16 TFLOP/s).
   */
  prefillTokensPerSecond: z.number().positive().default(8000),
  /** At most this many requests run at once (vLLM's --max-num-seqs); the rest wait, first come first served. */
  maxNumSeqs: z.number().int().positive().default(256),
  /**
   * Sim-only: a name sent in an `x-sim-instance` header on every streamed answer, so a benchmark
   * behind a router can tell which of several sims served a request. Unset (the default): no header.
   */
  instanceName: z.string().min(1).max(64).optional(),
  /**
   * Sim-only: keep every generation's engine time to first token (its wait for a batch slot plus
   * ttftMs plus the prefill of its uncached tokens) in `stats.firstTokenMs`, and send it on a
   * streamed answer as `x-sim-first-token-ms`, so a benchmark can read what a GPU would give apart
   * from its own machine's event-loop lag. Off (the default): nothing is kept or sent.
   */
  recordFirstTokens: z.boolean().default(false),
  /** The server the sim speaks as (SIM_FLAVOURS); current vLLM by default. */
  flavour: z.enum(SIM_FLAVOURS).default('vllm'),
  /**
   * Report cached prompt tokens (`usage.prompt_tokens_details`), as vLLM does only with
   * `--enable-prompt-tokens-details` and SGLang only with `--enable-cache-report` (both off by
   * default, so off here). llama.cpp always reports them: ignored there.
   */
  promptTokensDetails: z.boolean().default(false),
  /**
   * TCP_NODELAY on the sockets clients talk to. Unset: the flavour's server default (on for all
   * six: uvicorn and llama.cpp's cpp-httplib build both set it). false: a node:net relay in front
   * of the uWS listener keeps Nagle's algorithm on (sim/nagle-relay.ts).
   */
  noDelay: z.boolean().optional(),
  /**
   * GET /metrics answers. Unset: as the flavour's server by default (vLLM always; SGLang only
   * with `--enable-metrics`, llama.cpp only with `--metrics`: off).
   */
  metrics: z.boolean().optional(),
});
export type SimOptions = z.input<typeof simOptionsSchema> & {
  /** A standing fault from the start. */
  fault?: Fault | undefined;
  logger?: Logger | undefined;
};
/** The options with their defaults filled in. */
export type SimConfig = z.output<typeof simOptionsSchema>;
