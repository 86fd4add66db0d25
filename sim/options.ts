// What startSim accepts (and `rc sim` builds from its flags): where to listen, the served model,
// its pace, its prefix cache, and a standing fault.
import { z } from 'zod';
import type { Logger } from '../lib/log.js';
import type { Fault } from './faults.js';

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
});
export type SimOptions = z.input<typeof simOptionsSchema> & {
  /** A standing fault from the start. */
  fault?: Fault | undefined;
  logger?: Logger | undefined;
};
/** The options with their defaults filled in. */
export type SimConfig = z.output<typeof simOptionsSchema>;
