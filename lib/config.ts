// Every setting of the platform, in one place: its environment variable, its default, its
// validation. Sources, strongest first: environment, the JSON file named by RC_CONFIG, defaults.
// A bad value stops start-up with a ConfigError that names the setting.
import { readFileSync } from 'node:fs';
import { z } from 'zod';
import { ConfigError } from './errors.js';

const port = z.coerce.number().int().min(0).max(65535);
const positiveInt = z.coerce.number().int().positive();
const ms = z.coerce.number().int().min(1);

/** One entry of the shared model catalog. */
export const modelEntrySchema = z.strictObject({
  /** The name clients send as `model`. */
  name: z.string().min(1).max(256),
  /** OpenAI-compatible backends (vLLM, SGLang, sim) serving it. Empty: the embedded sim serves it. */
  upstreams: z.array(z.url({ protocol: /^https?$/ })).default([]),
  /** The model name the backend was started with, when it differs from `name`. */
  servedName: z.string().min(1).optional(),
  /** Whether the model supports tool calling. */
  tools: z.boolean().default(true),
  /** Whether the model emits reasoning (thinking) before its answer. */
  reasoning: z.boolean().default(false),
  /** Accepted `output_config.effort` / `reasoning_effort` tiers beyond `low` and `medium`. */
  efforts: z.array(z.string().min(1)).default([]),
  /** Context window in tokens (prompt + output). */
  maxContext: z.number().int().positive().default(32768),
  ownedBy: z.string().default('rc'),
});
export type ModelEntry = z.output<typeof modelEntrySchema>;

/** The shared catalog served when no models are configured: simulated backends started by `npm start`. */
export const DEFAULT_SIM_MODELS: ModelEntry[] = [
  modelEntrySchema.parse({ name: 'sim-chat' }),
  modelEntrySchema.parse({ name: 'sim-reasoner', reasoning: true, efforts: ['high'] }),
];

interface Setting<S extends z.ZodType> {
  env: string;
  schema: S;
  default: z.input<S> | undefined;
  doc: string;
}
const setting = <S extends z.ZodType>(env: string, schema: S, def: z.input<S> | undefined, doc: string): Setting<S> => ({
  env, schema, default: def, doc,
});

/** The settings table. Keys are also the keys accepted in the RC_CONFIG file. */
export const SETTINGS = {
  host: setting('RC_HOST', z.string().min(1), '127.0.0.1', 'Address every server binds'),
  apiPort: setting('RC_API_PORT', port, 8080, 'Platform API port'),
  gatewayPort: setting('RC_GATEWAY_PORT', port, 8090, 'Model gateway port'),
  agentPort: setting('RC_AGENT_PORT', port, 7070, 'Local host agent gRPC port'),
  simPortBase: setting('RC_SIM_PORT_BASE', port, 9100, 'First port of the embedded simulated backends (one per default model)'),
  dataDir: setting('RC_DATA_DIR', z.string().min(1), './data', 'Directory for SQLite, state and logs'),
  redisUrl: setting('REDIS_URL', z.union([z.literal(''), z.url({ protocol: /^rediss?$/ })]), '', 'Redis for gates and events; empty: in memory'),
  logLevel: setting('RC_LOG_LEVEL', z.enum(['silent', 'error', 'warn', 'info', 'debug']), 'info', 'Log level'),
  modelRpm: setting('RC_MODEL_RPM', positiveInt, 600, 'Default model API requests per minute per account'),
  modelTpm: setting('RC_MODEL_TPM', positiveInt, 1_000_000, 'Default model API tokens (in + out) per minute per account'),
  modelDailyTokens: setting('RC_MODEL_DAILY_TOKENS', positiveInt, 10_000_000, 'Default shared model API tokens per account per UTC day'),
  gatewayMaxBodyBytes: setting('RC_GATEWAY_MAX_BODY_BYTES', positiveInt, 8 * 1024 * 1024, 'Largest request body the gateway accepts (413 beyond)'),
  gatewayMaxInflight: setting('RC_GATEWAY_MAX_INFLIGHT', positiveInt, 2048, 'Requests in flight to backends before 503 pool exhausted'),
  upstreamConnections: setting('RC_UPSTREAM_CONNECTIONS', positiveInt, 256, 'Keep-alive connections per upstream'),
  upstreamHeadersTimeoutMs: setting('RC_UPSTREAM_HEADERS_TIMEOUT_MS', ms, 60_000, 'Wait for a backend response head'),
  upstreamIdleTimeoutMs: setting('RC_UPSTREAM_IDLE_TIMEOUT_MS', ms, 120_000, 'Longest silence between backend body chunks'),
} as const;

type Settings = typeof SETTINGS;
export type Config = { -readonly [K in keyof Settings]: z.output<Settings[K]['schema']> } & {
  /** Path of the RC_CONFIG file, if any. */
  configFile: string | undefined;
  /** The shared model catalog (from the config file; DEFAULT_SIM_MODELS when none is given). */
  models: ModelEntry[];
  /** True when `models` came from DEFAULT_SIM_MODELS. */
  defaultModels: boolean;
};

const fileSchema = z
  .object({ models: z.array(modelEntrySchema).optional() })
  .catchall(z.unknown());

/** Reads and validates the RC_CONFIG file. */
export function readConfigFile(path: string): z.output<typeof fileSchema> {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    throw new ConfigError(`RC_CONFIG: cannot read ${path}: ${(err as Error).message}`);
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (err) {
    throw new ConfigError(`RC_CONFIG: ${path} is not valid JSON: ${(err as Error).message}`);
  }
  const parsed = fileSchema.safeParse(json);
  if (!parsed.success) throw new ConfigError(`RC_CONFIG (${path}): ${describe(parsed.error)}`);
  const names = new Set<string>();
  for (const m of parsed.data.models ?? []) {
    if (names.has(m.name)) throw new ConfigError(`RC_CONFIG (${path}): models: duplicate name ${m.name}`);
    names.add(m.name);
  }
  const unknown = Object.keys(parsed.data).filter((k) => k !== 'models' && !(k in SETTINGS));
  if (unknown.length) throw new ConfigError(`RC_CONFIG (${path}): unknown setting ${unknown.join(', ')}`);
  return parsed.data;
}

function describe(error: z.ZodError): string {
  return error.issues.map((i) => `${i.path.join('.') || '(root)'}: ${i.message}`).join('; ');
}

/** Builds the configuration from `env` (default process.env) and the RC_CONFIG file it names. */
export function loadConfig(env: NodeJS.ProcessEnv = process.env): Config {
  const configFile = env.RC_CONFIG || undefined;
  const file = configFile ? readConfigFile(configFile) : {};
  const out: Record<string, unknown> = {};
  for (const [key, s] of Object.entries(SETTINGS) as [string, Setting<z.ZodType>][]) {
    const fromEnv = env[s.env];
    const raw = fromEnv !== undefined && fromEnv !== '' ? fromEnv : key in file ? (file as Record<string, unknown>)[key] : s.default;
    const parsed = s.schema.safeParse(raw);
    if (!parsed.success) {
      const source = fromEnv !== undefined && fromEnv !== '' ? `environment variable ${s.env}` : key in file ? `RC_CONFIG key ${key}` : 'default';
      throw new ConfigError(`Invalid setting ${key} (${source}) = ${JSON.stringify(raw)}: ${describe(parsed.error)}`);
    }
    out[key] = parsed.data;
  }
  const models = file.models && file.models.length ? file.models : DEFAULT_SIM_MODELS;
  return { ...(out as Omit<Config, 'configFile' | 'models' | 'defaultModels'>), configFile, models, defaultModels: models === DEFAULT_SIM_MODELS };
}

/** Rows of the settings table, for `rc config` and the README. */
export function describeSettings(): { key: string; env: string; default: unknown; doc: string }[] {
  return Object.entries(SETTINGS).map(([key, s]) => ({ key, env: s.env, default: s.default, doc: s.doc }));
}
