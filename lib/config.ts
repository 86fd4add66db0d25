// Every setting of the platform, in one place: its environment variable, its default, its
// validation. Sources, strongest first: environment, the JSON file named by RC_CONFIG, defaults.
// A bad value stops start-up with a ConfigError that names the setting.
import { readFileSync } from 'node:fs';
import { z } from 'zod';
import { assertCookieSitesApart, publicOriginsOf } from './cookie-sites.js';
import { ConfigError } from './errors.js';

const port = z.coerce.number().int().min(0).max(65535);
const positiveInt = z.coerce.number().int().positive();
const ms = z.coerce.number().int().min(1);
const bool = z.union([z.boolean(), z.enum(['0', '1', 'false', 'true']).transform((v) => v === '1' || v === 'true')]);
/** An http(s) URL, or '' for none. */
const httpUrlOrEmpty = z.union([z.literal(''), z.url({ protocol: /^https?$/ })]);
/** The instance proxy's base URL: instance ids become the first label of its host, so a host name, not an IP address. */
const proxyBaseUrlOrEmpty = httpUrlOrEmpty.refine(
  (u) => u === '' || !/^(\d+\.\d+\.\d+\.\d+|\[.*\])$/.test(new URL(u).hostname),
  'must name a host (a wildcard DNS name), not an IP address: each instance is served on <instance id>.<host>',
);
/** A secret of at least 16 characters, or '' to have one generated. */
const secretOrEmpty = z.union([z.literal(''), z.string().min(16)]);

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
  /**
   * Context window in tokens (prompt + output). Absent: the one the backend reports in its
   * /v1/models (vLLM and SGLang max_model_len, llama.cpp meta.n_ctx; gateway/backends/backend-kind.ts);
   * the embedded sim then uses 32768.
   */
  maxContext: z.number().int().positive().optional(),
  /**
   * The server behind the upstreams, which decides how prompts are counted (gateway/admission/tokenize.ts).
   * Absent: told by the backend itself (its /v1/models `owned_by`, or its /tokenize answer).
   */
  server: z.enum(['vllm', 'sglang', 'llama.cpp']).optional(),
  /**
   * Fit max_tokens / max_completion_tokens / max_output_tokens into the context on every protocol
   * (gateway/admission/context-fit.ts); false passes the backend's own error through instead.
   */
  fitMaxTokens: z.boolean().default(true),
  ownedBy: z.string().default('rc'),
  /**
   * How a request picks among several upstreams (gateway/README.md "Routing"): 'prefix' (the one
   * holding the longest prefix of the conversation, else its key, with bounded load),
   * 'least-loaded' (sticky by user, else fewest in flight), 'round-robin'. Absent: 'prefix'.
   */
  routing: z.enum(['prefix', 'least-loaded', 'round-robin']).optional(),
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
  env,
  schema,
  default: def,
  doc,
});

/** The settings table. Keys are also the keys accepted in the RC_CONFIG file. */
export const SETTINGS = {
  host: setting('RC_HOST', z.string().min(1), '127.0.0.1', 'Address every server binds'),
  apiPort: setting('RC_API_PORT', port, 8080, 'Platform API port'),
  gatewayPort: setting('RC_GATEWAY_PORT', port, 8090, 'Model gateway port'),
  gatewayReusePort: setting(
    'RC_GATEWAY_REUSE_PORT',
    bool,
    false,
    'rc gateway: share RC_GATEWAY_PORT with other rc gateway processes on this host (SO_REUSEPORT); off: a port in use stops start-up',
  ),
  metricsHost: setting(
    'RC_METRICS_HOST',
    z.string().min(1),
    '127.0.0.1',
    "Address of the Prometheus listeners, the gateway's and the control plane's (/metrics; never on a public port)",
  ),
  metricsPort: setting('RC_METRICS_PORT', port, 8091, "Port of the gateway's Prometheus listener (0: any free port)"),
  controlMetricsPort: setting(
    'RC_CONTROL_METRICS_PORT',
    port,
    8092,
    "Port of the control plane's Prometheus listener on RC_METRICS_HOST (/metrics: the GPU gauges; 0: any free port)",
  ),
  agentPort: setting('RC_AGENT_PORT', port, 7070, 'Local host agent gRPC port'),
  simPortBase: setting('RC_SIM_PORT_BASE', port, 9100, 'First port of the embedded simulated backends (one per default model)'),
  simTtftMs: setting('RC_SIM_TTFT_MS', z.coerce.number().min(0), 80, 'Embedded simulated backends: time to first token (ms)'),
  simTokensPerSecond: setting('RC_SIM_TOKENS_PER_SECOND', z.coerce.number().positive(), 50, 'Embedded simulated backends: output tokens per second'),
  simFast: setting('RC_SIM_FAST', bool, false, 'Embedded simulated backends: no delays at all (1/true)'),
  simReplicas: setting(
    'RC_SIM_REPLICAS',
    z.coerce.number().int().min(1).max(16),
    1,
    'Embedded simulated backends per default model (more than 1 shows the routing among backends)',
  ),
  simFlavour: setting(
    'RC_SIM_FLAVOUR',
    // sim/options.ts SIM_FLAVOURS (lib/ does not import a part; test/lib/config.test.ts keeps them equal).
    z.enum(['vllm-0.10.1', 'vllm-0.11.1', 'vllm', 'sglang-0.5', 'sglang', 'llama.cpp']),
    'vllm',
    'Embedded simulated backends: the server they speak as, byte for byte (sim/README.md "Flavours"); they report cached tokens as a server started with its flag does',
  ),
  dataDir: setting('RC_DATA_DIR', z.string().min(1), './data', 'Directory for SQLite, state and logs'),
  databaseUrl: setting(
    'RC_DATABASE_URL',
    z.union([z.literal(''), z.url({ protocol: /^postgres(ql)?$/ })]),
    '',
    "The control plane's state on PostgreSQL 14 or later (postgres://user:password@host:port/db); empty: SQLite in the data dir",
  ),
  databaseNamedStatements: setting(
    'RC_DATABASE_NAMED_STATEMENTS',
    bool,
    true,
    'PostgreSQL: prepare each statement once per connection under a name (0: unnamed statements, for a pooler in transaction mode that cannot keep named ones, such as PgBouncer before 1.21)',
  ),
  redisUrl: setting(
    'REDIS_URL',
    z.union([z.literal(''), z.url({ protocol: /^rediss?$/ })]),
    '',
    'Redis for gates, sign-in, sign-up and coupon attempt limits, and events; empty: in memory',
  ),
  logLevel: setting('RC_LOG_LEVEL', z.enum(['silent', 'error', 'warn', 'info', 'debug']), 'info', 'Log level'),
  modelRpm: setting('RC_MODEL_RPM', positiveInt, 600, 'Default model API requests per minute per account'),
  modelTpm: setting('RC_MODEL_TPM', positiveInt, 1_000_000, 'Default model API tokens (in + out) per minute per account'),
  modelDailyTokens: setting('RC_MODEL_DAILY_TOKENS', positiveInt, 10_000_000, 'Default shared model API tokens per account per UTC day'),
  modelUnverifiedDailyTokens: setting(
    'RC_MODEL_UNVERIFIED_DAILY_TOKENS',
    z.coerce.number().int().min(0),
    100_000,
    'Daily shared model API tokens of an account under review (open sign-up); 0: no shared model access for them',
  ),
  gateRedisTimeoutMs: setting('RC_GATE_REDIS_TIMEOUT_MS', ms, 50, 'Longest wait on Redis for a gate decision before the in-memory gates decide'),
  gateKeyPrefix: setting(
    'RC_GATE_KEY_PREFIX',
    z
      .string()
      .min(1)
      .max(64)
      .regex(/^[^{}\s]+$/, 'no braces or spaces'),
    'rc:',
    "Prefix of everything the platform keeps in Redis: the gates' keys, the sign-in, sign-up and coupon attempt limits (<prefix>auth:) and the event channel (<prefix>events); platforms sharing one Redis need different prefixes",
  ),
  authRedisTimeoutMs: setting(
    'RC_AUTH_REDIS_TIMEOUT_MS',
    ms,
    500,
    "Longest wait on Redis for a sign-in, sign-up or coupon attempt limit before this control plane's in-memory limits decide",
  ),
  gatewayMaxBodyBytes: setting('RC_GATEWAY_MAX_BODY_BYTES', positiveInt, 8 * 1024 * 1024, 'Largest request body the gateway accepts (413 beyond)'),
  gatewayMaxTools: setting('RC_GATEWAY_MAX_TOOLS', positiveInt, 4096, 'Tools in one model API request, namespace functions included (400 beyond)'),
  gatewayMaxMessages: setting('RC_GATEWAY_MAX_MESSAGES', positiveInt, 50_000, 'Messages (or /v1/responses input items) in one model API request (400 beyond)'),
  gatewayMaxBlocks: setting('RC_GATEWAY_MAX_BLOCKS', positiveInt, 100_000, 'Content blocks in one model API request, system included (400 beyond)'),
  gatewayMaxInflight: setting('RC_GATEWAY_MAX_INFLIGHT', positiveInt, 2048, 'Requests in flight to backends before 503 pool exhausted'),
  upstreamConnections: setting('RC_UPSTREAM_CONNECTIONS', positiveInt, 256, 'Keep-alive connections per upstream'),
  upstreamHeadersTimeoutMs: setting(
    'RC_UPSTREAM_HEADERS_TIMEOUT_MS',
    ms,
    60_000,
    'No response head for this long while the backend shows no sign of life (no other response from it progressing, its /health not answering within as long): a dead backend, 502 upstream_timeout. A busy backend is waited for',
  ),
  upstreamIdleTimeoutMs: setting(
    'RC_UPSTREAM_IDLE_TIMEOUT_MS',
    ms,
    120_000,
    'The same for silence between two body chunks of a response (a stream queued after its head)',
  ),
  upstreamRequestTimeoutMs: setting(
    'RC_UPSTREAM_REQUEST_TIMEOUT_MS',
    ms,
    1_800_000,
    'Longest a backend request may take, from its write to the end of its response, however alive the backend (502 upstream_timeout; never counts toward taking the backend out)',
  ),
  upstreamConnectTimeoutMs: setting('RC_UPSTREAM_CONNECT_TIMEOUT_MS', ms, 5_000, 'Wait for a TCP connection to a backend'),
  upstreamEjectMs: setting('RC_UPSTREAM_EJECT_MS', ms, 10_000, 'How long a failing backend is taken out of rotation'),
  upstreamMetricsIntervalMs: setting(
    'RC_UPSTREAM_METRICS_INTERVAL_MS',
    z.coerce.number().int().min(0),
    2_000,
    "How often the backends of a model routed by prefix are asked for vLLM's queue (GET /metrics); 0: never",
  ),
  routeEntries: setting('RC_ROUTE_TABLE_ENTRIES', positiveInt, 65_536, "Entries of a model's prefix table (12 bytes each)"),
  routeEpsilon: setting(
    'RC_ROUTE_EPSILON',
    z.coerce.number().min(0),
    0.25,
    'Bounded-load slack for a new conversation: a backend takes it within (1 + epsilon) times the mean in flight',
  ),
  routeKeepEpsilon: setting('RC_ROUTE_KEEP_EPSILON', z.coerce.number().min(0), 1, 'Bounded-load slack for a request whose prefix a backend holds'),
  routeMinCeiling: setting('RC_ROUTE_MIN_CEILING', positiveInt, 4, 'Requests in flight a backend always takes before bounded load moves any'),
  routeMaxWaiting: setting(
    'RC_ROUTE_MAX_WAITING',
    z.coerce.number().int().min(0),
    4,
    "vLLM's waiting requests beyond which a backend takes no request routed by prefix",
  ),
  gatewayDefaultMaxTokens: setting(
    'RC_GATEWAY_DEFAULT_MAX_TOKENS',
    positiveInt,
    1024,
    'Output tokens reserved at admission when a request gives no max_tokens',
  ),
  messagesThinkingSecret: setting(
    'RC_MESSAGES_THINKING_SECRET',
    z.string(),
    '',
    'Secret signing thinking blocks on /v1/messages; empty: random per process (set it when several gateways serve one address)',
  ),
  messagesPingIntervalMs: setting('RC_MESSAGES_PING_INTERVAL_MS', ms, 5_000, 'Silence on a /v1/messages stream before a ping event is sent'),
  apiMaxBodyBytes: setting('RC_API_MAX_BODY_BYTES', positiveInt, 64 * 1024, 'Largest request body the platform API accepts (413 beyond)'),
  sessionTtlHours: setting('RC_SESSION_TTL_HOURS', positiveInt, 168, 'Lifetime of a browser session (sign-in cookie)'),
  cookieSecure: setting(
    'RC_COOKIE_SECURE',
    z.enum(['auto', 'always', 'never']),
    'auto',
    'Secure session cookie (__Host-rc_session, the only name then read); auto: when X-Forwarded-Proto is https',
  ),
  signup: setting('RC_SIGNUP', z.enum(['open', 'closed']), 'open', 'Whether POST /api/auth/signup creates accounts'),
  trustProxy: setting(
    'RC_TRUST_PROXY',
    bool,
    false,
    "Platform API, instance proxy and gateway behind a reverse proxy: client address from the last X-Forwarded-For entry (every per-address limit), X-Forwarded-Host counts as the API's own origin (1/true)",
  ),
  loginPerAddressPerMinute: setting(
    'RC_LOGIN_PER_ADDRESS_PER_MINUTE',
    positiveInt,
    10,
    'Sign-in attempts per client address per minute (429 beyond; see control-plane/README.md)',
  ),
  signupPerAddressPerHour: setting('RC_SIGNUP_PER_ADDRESS_PER_HOUR', positiveInt, 5, 'Sign-ups per client address per hour (429 beyond)'),
  emailVerification: setting(
    'RC_EMAIL_VERIFICATION',
    z.enum(['off', 'required']),
    'off',
    'required: open sign-up sends a verification link and sign-in answers 409 email_verification_required until it is opened',
  ),
  smtpUrl: setting(
    'RC_SMTP_URL',
    z.union([z.literal(''), z.url({ protocol: /^smtp$/ })]),
    '',
    "SMTP server for the platform's mails (smtp://host:port, no AUTH or TLS: a local relay); empty: mails are logged",
  ),
  mailFrom: setting(
    'RC_MAIL_FROM',
    z.string().regex(/^[^\s<>@]+@[^\s<>@]+$/, 'an e-mail address'),
    'rc-platform@localhost',
    "Sender address of the platform's mails",
  ),
  apiPublicUrl: setting(
    'RC_API_PUBLIC_URL',
    httpUrlOrEmpty,
    '',
    'Public URL of the platform API in mailed links and instance base_url (the proxy hand-over); empty: its listening URL',
  ),
  couponRedemption: setting('RC_COUPON_REDEMPTION', z.enum(['open', 'closed']), 'open', 'Whether POST /api/credits/redeem accepts coupons (closed: 503)'),
  couponAttemptsPerAccountPerHour: setting(
    'RC_COUPON_ATTEMPTS_PER_ACCOUNT_PER_HOUR',
    positiveInt,
    10,
    'Coupon redemption attempts per account per hour, right or wrong (429 beyond)',
  ),
  couponAttemptsPerAddressPerHour: setting(
    'RC_COUPON_ATTEMPTS_PER_ADDRESS_PER_HOUR',
    positiveInt,
    30,
    'Coupon redemption attempts per client address per hour, right or wrong (429 beyond)',
  ),
  couponRetryAfterSec: setting('RC_COUPON_RETRY_AFTER_SEC', positiveInt, 3600, 'Retry-After of the 503 while coupon redemption is closed'),
  agentToken: setting('RC_AGENT_TOKEN', secretOrEmpty, '', 'Shared token between control plane and agent; empty: generated into <dataDir>/agent/token'),
  agentRuntime: setting(
    'RC_AGENT_RUNTIME',
    z.enum(['auto', 'process', 'docker']),
    'auto',
    'How the agent runs instances: docker (containers), process (host processes, one trusted user only), auto: docker when an engine answers on the socket, else process with a warning',
  ),
  agentAdvertiseHost: setting('RC_AGENT_ADVERTISE_HOST', z.string(), '', 'Address where instance ports are reachable; empty: the bind address'),
  agentGpuDetect: setting(
    'RC_AGENT_GPU_DETECT',
    z.enum(['auto', 'configured']),
    'auto',
    'GPU inventory: nvidia-smi when present (auto), else the configured simulated GPUs',
  ),
  agentGpus: setting('RC_AGENT_GPUS', z.coerce.number().int().min(0).max(64), 4, 'Simulated GPUs when nvidia-smi is absent'),
  agentGpuModel: setting('RC_AGENT_GPU_MODEL', z.string().min(1), 'Simulated GPU', 'Model name of the simulated GPUs'),
  agentGpuMemoryMb: setting('RC_AGENT_GPU_MEMORY_MB', positiveInt, 81920, 'Memory of each simulated GPU (MiB)'),
  agentGpuSampleMs: setting(
    'RC_AGENT_GPU_SAMPLE_MS',
    z.coerce.number().int().min(0),
    5000,
    'GPU telemetry: one nvidia-smi call for every GPU this often (utilization, memory); 0: off. Simulated GPUs are never sampled',
  ),
  agentReadyTimeoutMs: setting('RC_AGENT_READY_TIMEOUT_MS', ms, 120_000, 'Readiness deadline of an instance (port open)'),
  agentServingReadyTimeoutMs: setting(
    'RC_AGENT_SERVING_READY_TIMEOUT_MS',
    ms,
    1_800_000,
    'Readiness deadline of vllm/sglang instances (port open and /health 200)',
  ),
  agentStopGraceMs: setting('RC_AGENT_STOP_GRACE_MS', ms, 10_000, 'Time between SIGTERM and SIGKILL when stopping an instance'),
  agentLostControlPlaneMs: setting(
    'RC_AGENT_LOST_CONTROL_PLANE_MS',
    z.coerce.number().int().min(0),
    600_000,
    'Stop every instance after this long without the control plane; 0 never',
  ),
  agentDockerSocket: setting('RC_AGENT_DOCKER_SOCKET', z.string().min(1), '/var/run/docker.sock', 'Docker Engine API socket (docker runtime)'),
  agentInstancesDir: setting(
    'RC_AGENT_INSTANCES_DIR',
    z.string(),
    '',
    'Instance homes and process volumes, outside the data dir; empty: <RC_DATA_DIR>-instances',
  ),
  agentProcessUser: setting(
    'RC_AGENT_PROCESS_USER',
    z.string().min(1),
    'nobody',
    'Process runtime, platform running as root: the unprivileged user instances run as (must exist)',
  ),
  agentProcessUntrusted: setting(
    'RC_AGENT_PROCESS_UNTRUSTED',
    z.enum(['refuse', 'allow']),
    'refuse',
    'Process runtime: refuse to start instances while the agent listens beyond loopback (allow: every account is trusted)',
  ),
  agentPullPolicy: setting(
    'RC_AGENT_PULL_POLICY',
    z.enum(['if-not-present', 'always', 'never']),
    'if-not-present',
    'Docker: when to pull an instance image (a local image is used as it is unless always)',
  ),
  agentPublishHost: setting(
    'RC_AGENT_PUBLISH_HOST',
    z.string(),
    '',
    'Docker: address instance ports are published on; empty: the advertise address when it is an IP, else 127.0.0.1 (0.0.0.0 only if set here)',
  ),
  agentMemoryMbPerGpu: setting(
    'RC_AGENT_MEMORY_MB_PER_GPU',
    positiveInt,
    65_536,
    'Docker: container memory limit per GPU (MiB; a CPU-only instance counts as one GPU)',
  ),
  agentCpusPerGpu: setting('RC_AGENT_CPUS_PER_GPU', z.coerce.number().positive().max(1024), 8, "Docker: CPUs per GPU (capped at the host's)"),
  agentPidsPerGpu: setting('RC_AGENT_PIDS_PER_GPU', positiveInt, 4096, 'Docker: process limit per GPU'),
  agentDiskQuota: setting(
    'RC_AGENT_DISK_QUOTA',
    z.enum(['auto', 'off']),
    'auto',
    'Docker: cap the writable layer at disk_gb where the storage driver can (auto), or never',
  ),
  agentToolbox: setting('RC_AGENT_TOOLBOX', bool, true, 'Docker: mount rc and rc-tunnel read-only at /opt/rc in every container'),
  agentFirewall: setting(
    'RC_AGENT_FIREWALL',
    z.enum(['auto', 'on', 'off']),
    'auto',
    'Docker: iptables rules that keep containers off the host, other instances and private addresses (root, iptables). on: refuse to start without them; auto: the same, but an agent on loopback only runs without them, with a warning; off: the operator isolates them',
  ),
  agentNetworkPool: setting(
    'RC_AGENT_NETWORK_POOL',
    z.string().regex(/^\d{1,3}(\.\d{1,3}){3}\/(\d|1\d|2[0-9])$/, 'an IPv4 CIDR of /29 or larger, e.g. 10.231.0.0/16'),
    '10.231.0.0/16',
    "Docker: IPv4 pool of the instances' own networks (a /29 each; subnets in use by the engine or the host's routes are skipped)",
  ),
  agentNetworkPrefix: setting(
    'RC_AGENT_NETWORK_PREFIX',
    z.string().regex(/^[a-z][a-z0-9]{0,7}$/, '1-8 lowercase letters and digits, starting with a letter'),
    'rc',
    'Docker: prefix of the instance bridges (<prefix>-<hash>) and the firewall chains (<prefix>-isolate-in/-fwd/-relay); agents on one host share it',
  ),
  agentFirewallBlock: setting(
    'RC_AGENT_FIREWALL_BLOCK',
    z
      .string()
      .transform((v) =>
        v
          .split(',')
          .map((s) => s.trim())
          .filter(Boolean),
      )
      .pipe(z.array(z.string().regex(/^\d{1,3}(\.\d{1,3}){3}\/\d{1,2}$/, 'IPv4 CIDRs, comma-separated'))),
    '',
    'Docker: more destinations containers may not reach (comma-separated IPv4 CIDRs) beyond private, CGNAT and link-local ranges, e.g. fleet hosts on public addresses',
  ),
  instanceCreditsPerGpuHour: setting(
    'RC_INSTANCE_CREDITS_PER_GPU_HOUR',
    z.coerce.number().min(0).max(1_000_000),
    1,
    'Instance price in credits per GPU-hour (accrued per second)',
  ),
  instanceBillingPeriodSec: setting(
    'RC_INSTANCE_BILLING_PERIOD_SEC',
    z.coerce.number().int().min(1).max(86_400),
    60,
    'Instance usage is written to the ledger once per period of this many seconds',
  ),
  instanceMaxLifetimeSec: setting(
    'RC_INSTANCE_MAX_LIFETIME_SEC',
    positiveInt,
    86_400,
    'Maximum lifetime of an instance, from placement on a host (destroyed after)',
  ),
  instanceIdleTimeoutSec: setting('RC_INSTANCE_IDLE_TIMEOUT_SEC', positiveInt, 3_600, 'A ready instance with no visible activity for this long is destroyed'),
  instanceStopWarningSec: setting(
    'RC_INSTANCE_STOP_WARNING_SEC',
    z.coerce.number().int().min(0),
    600,
    "How long before an idle or lifetime stop the owner is warned (status stop_warning, pushed to the console's status stream); 0: no warning",
  ),
  instanceGpuBusyPct: setting(
    'RC_INSTANCE_GPU_BUSY_PCT',
    z.coerce.number().min(0).max(100),
    1,
    'An instance whose GPU averages at least this utilization (%) over the busy window is active (idle GPUs read 0 %, a Python-bound decode loop 0-5 %); 0: GPUs never count',
  ),
  instanceGpuBusyWindowSec: setting('RC_INSTANCE_GPU_BUSY_WINDOW_SEC', positiveInt, 300, 'The window the GPU utilization is averaged over for the idle rule'),
  instanceGpuHistorySamples: setting(
    'RC_INSTANCE_GPU_HISTORY_SAMPLES',
    z.coerce.number().int().min(0).max(100_000),
    720,
    "GPU telemetry samples the control plane keeps per GPU, in memory (720: 1 hour at the agents' default 5 s; about 24 bytes a sample); 0: no history",
  ),
  instanceLaunchRate: setting(
    'RC_INSTANCE_LAUNCH_RATE',
    z.string().regex(/^\d+:\d+(,\d+:\d+)*$/, 'windows as seconds:count,seconds:count,...'),
    '60:1,600:3,3600:5',
    'Launch rate windows per account (seconds:launches,...)',
  ),
  instanceSchedule: setting('RC_INSTANCE_SCHEDULE', z.enum(['pack', 'spread']), 'pack', 'Placement: pack (fullest host that fits) or spread (emptiest host)'),
  instanceTickMs: setting('RC_INSTANCE_TICK_MS', ms, 1_000, 'How often billing, lifetime, idle and host checks run'),
  instanceLeaseMs: setting(
    'RC_INSTANCE_LEASE_MS',
    ms,
    15_000,
    'Control planes on one database: the lease on billing, stops, host checks and the queue runs this long past its last renewal (each tick renews it); another control plane takes over after it',
  ),
  instanceHostUnreachableMs: setting('RC_INSTANCE_HOST_UNREACHABLE_MS', ms, 10_000, 'An agent silent this long: its instances are marked "host unreachable"'),
  instanceHostLostMs: setting('RC_INSTANCE_HOST_LOST_MS', ms, 600_000, 'An agent silent this long: its instances fail (host_lost) and billing stops'),
  instanceHostStallMs: setting(
    'RC_INSTANCE_HOST_STALL_MS',
    ms,
    20_000,
    'An agent stream without a heartbeat (every 5 s) for this long is presumed cut and redialled',
  ),
  instancePublicUrl: setting(
    'RC_INSTANCE_PUBLIC_URL',
    httpUrlOrEmpty,
    '',
    'Public URL of the gateway in instance base URLs; empty: http://RC_HOST:RC_GATEWAY_PORT',
  ),
  launchTokenTtlSec: setting('RC_LAUNCH_TOKEN_TTL_SEC', positiveInt, 600, 'Lifetime of a launch verification token (single use)'),
  tunnelSecret: setting(
    'RC_TUNNEL_SECRET',
    secretOrEmpty,
    '',
    'Secret signing rc-tunnel identities (shared by control plane and gateways); empty: generated into <dataDir>/tunnel/secret',
  ),
  tunnelBrokers: setting(
    'RC_TUNNEL_BROKERS',
    z.union([z.literal(''), z.string().regex(/^https?:\/\/[^\s,]+(,https?:\/\/[^\s,]+)*$/, 'comma-separated http(s) URLs')]),
    '',
    "Gateway replicas rc-tunnel connects to, comma-separated as instances reach them (a tunnel then answers through each); empty: the instances' public gateway URL",
  ),
  proxyPort: setting(
    'RC_PROXY_PORT',
    port,
    8081,
    'Instance proxy port (browser access to instance apps, each on its own origin <instance id>.localhost:<port>)',
  ),
  tunnelPort: setting(
    'RC_TUNNEL_PORT',
    port,
    8082,
    'Public tunnel URLs port (rc-tunnel services; a host name, so an origin, per tunnel, apart from the gateway and the proxy)',
  ),
  tunnelPublicUrl: setting(
    'RC_TUNNEL_PUBLIC_URL',
    httpUrlOrEmpty,
    '',
    'Public origin of tunnels, each served at https://<tunnel id>.<its host>/ (a wildcard DNS name and certificate); empty: http://<tunnel id>.localhost:RC_TUNNEL_PORT/',
  ),
  proxyPublicUrl: setting(
    'RC_PROXY_PUBLIC_URL',
    proxyBaseUrlOrEmpty,
    '',
    'Base URL of the instance proxy: each app is served on <scheme>://<instance id>.<its host> (a wildcard name); empty: http://localhost:RC_PROXY_PORT',
  ),
  internalToken: setting(
    'RC_INTERNAL_TOKEN',
    secretOrEmpty,
    '',
    "Token gateways present to the control plane's internal API; empty on the control plane: generated into <dataDir>/internal.token",
  ),
  controlPlaneUrl: setting(
    'RC_CONTROL_PLANE_URL',
    httpUrlOrEmpty,
    '',
    'rc gateway: the control plane to learn keys, limits, sessions, catalog and instance routes from; empty: --keys-file and RC_CONFIG',
  ),
  gatewayResyncMs: setting(
    'RC_GATEWAY_RESYNC_MS',
    ms,
    30_000,
    'rc gateway with a control plane: how often the whole snapshot is fetched again (events keep it current in between)',
  ),
  gatewayActivityReportMs: setting(
    'RC_GATEWAY_ACTIVITY_REPORT_MS',
    ms,
    15_000,
    'rc gateway with a control plane: traffic to an instance is reported (idle timer) at most once per this interval per replica',
  ),
  // Per-tenant bounds of issue 44 (tunnels, log bytes, uploads, held responses): gateway/tunnel/limits.ts,
  // agent/log-file.ts, lib/upload-limits.ts, lib/held-limits.ts. Per process (README, "Limits and replicas").
  tunnelMaxPerInstance: setting('RC_TUNNEL_MAX_PER_INSTANCE', positiveInt, 16, 'Live tunnels per instance (429 beyond)'),
  tunnelMaxPerAccount: setting('RC_TUNNEL_MAX_PER_ACCOUNT', positiveInt, 32, 'Live tunnels per account, all its instances together (429 beyond)'),
  tunnelMaxPerAddress: setting(
    'RC_TUNNEL_MAX_PER_ADDRESS',
    positiveInt,
    1024,
    "Open tunnel connections per client address (an agent's relay is one address for all its containers; the relay bounds each container)",
  ),
  tunnelConnectsPerMinute: setting('RC_TUNNEL_CONNECTS_PER_MINUTE', positiveInt, 60, 'Tunnel connection attempts per instance per minute (429 beyond)'),
  tunnelAddressConnectsPerMinute: setting(
    'RC_TUNNEL_ADDRESS_CONNECTS_PER_MINUTE',
    positiveInt,
    600,
    'Tunnel connection attempts per client address per minute (429 beyond)',
  ),
  tunnelRelayPerInstance: setting(
    'RC_TUNNEL_RELAY_PER_INSTANCE',
    positiveInt,
    24,
    "Docker: connections one container may hold open through the agent's tunnel relay (429 beyond)",
  ),
  gatewayUploadsPerAddress: setting(
    'RC_GATEWAY_UPLOADS_PER_ADDRESS',
    positiveInt,
    256,
    "Model gateway (shared model routes, dedicated endpoints, tunnels' public requests): request bodies still arriving per client address (429 beyond; a body that arrives in one read never counts)",
  ),
  gatewayUploadsPerAccount: setting(
    'RC_GATEWAY_UPLOADS_PER_ACCOUNT',
    positiveInt,
    128,
    "Model gateway (shared model routes, dedicated endpoints, tunnels' public requests to the account's instances): request bodies still arriving per account (429 beyond)",
  ),
  gatewayUploadBytesPerAddress: setting(
    'RC_GATEWAY_UPLOAD_BYTES_PER_ADDRESS',
    positiveInt,
    256 * 1024 * 1024,
    "Model gateway (shared model routes, dedicated endpoints, tunnels' public requests): bytes of request bodies still arriving per client address (429 beyond)",
  ),
  gatewayUploadBytesPerAccount: setting(
    'RC_GATEWAY_UPLOAD_BYTES_PER_ACCOUNT',
    positiveInt,
    128 * 1024 * 1024,
    "Model gateway (shared model routes, dedicated endpoints, tunnels' public requests to the account's instances): bytes of request bodies still arriving per account (429 beyond)",
  ),
  dedicatedUploadsPerInstance: setting(
    'RC_DEDICATED_UPLOADS_PER_INSTANCE',
    positiveInt,
    64,
    "Dedicated endpoints and tunnels' public requests: request bodies still arriving per instance (429 beyond; they count against their address's and account's RC_GATEWAY_UPLOAD* limits too)",
  ),
  dedicatedUploadBytesPerInstance: setting(
    'RC_DEDICATED_UPLOAD_BYTES_PER_INSTANCE',
    positiveInt,
    64 * 1024 * 1024,
    "Dedicated endpoints and tunnels' public requests: bytes of request bodies still arriving per instance (429 beyond)",
  ),
  // Responses held open (lib/held-limits.ts): streams, requests waiting on an instance, event streams.
  gatewayStreamsPerAccount: setting(
    'RC_GATEWAY_STREAMS_PER_ACCOUNT',
    positiveInt,
    256,
    'Model gateway: streams open per account on the shared model routes (stream: true; 429 stream_limit_exceeded beyond)',
  ),
  gatewayStreamsPerAddress: setting(
    'RC_GATEWAY_STREAMS_PER_ADDRESS',
    positiveInt,
    512,
    'Model gateway: streams open per client address on the shared model routes (addresses are read once the gateway holds half as many streams; 429 stream_limit_exceeded beyond)',
  ),
  dedicatedInflightPerInstance: setting(
    'RC_DEDICATED_INFLIGHT_PER_INSTANCE',
    positiveInt,
    512,
    'Dedicated endpoints: requests in flight per instance, streams included, from admission to the end of the response (429 beyond)',
  ),
  dedicatedInflightPerAccount: setting(
    'RC_DEDICATED_INFLIGHT_PER_ACCOUNT',
    positiveInt,
    1024,
    'Dedicated endpoints: requests in flight per account, all its instances together (429 beyond)',
  ),
  dedicatedInflightPerAddress: setting(
    'RC_DEDICATED_INFLIGHT_PER_ADDRESS',
    positiveInt,
    1024,
    'Dedicated endpoints: requests in flight per client address (429 beyond)',
  ),
  proxyInflightPerInstance: setting(
    'RC_PROXY_INFLIGHT_PER_INSTANCE',
    positiveInt,
    256,
    "Instance proxy: requests in flight and WebSockets open per instance, from admission to the response's end or the socket's close (429, or a WebSocket closed with 1013 and the reason, beyond)",
  ),
  proxyInflightPerAccount: setting(
    'RC_PROXY_INFLIGHT_PER_ACCOUNT',
    positiveInt,
    512,
    'Instance proxy: requests in flight and WebSockets open per account, all its instances together (429 or 1013 beyond)',
  ),
  proxyInflightPerAddress: setting(
    'RC_PROXY_INFLIGHT_PER_ADDRESS',
    positiveInt,
    512,
    'Instance proxy: requests in flight and WebSockets open per client address (429 or 1013 beyond)',
  ),
  proxyUploadBytesPerInstance: setting(
    'RC_PROXY_UPLOAD_BYTES_PER_INSTANCE',
    positiveInt,
    64 * 1024 * 1024,
    'Instance proxy: bytes of request bodies still arriving per instance (429 beyond; a body that arrives in one read never counts)',
  ),
  proxyUploadBytesPerAccount: setting(
    'RC_PROXY_UPLOAD_BYTES_PER_ACCOUNT',
    positiveInt,
    128 * 1024 * 1024,
    'Instance proxy: bytes of request bodies still arriving per account (429 beyond)',
  ),
  proxyUploadBytesPerAddress: setting(
    'RC_PROXY_UPLOAD_BYTES_PER_ADDRESS',
    positiveInt,
    256 * 1024 * 1024,
    'Instance proxy: bytes of request bodies still arriving per client address, counted from their first byte, before the session is known (429 beyond)',
  ),
  apiStreamsPerAccount: setting(
    'RC_API_STREAMS_PER_ACCOUNT',
    positiveInt,
    16,
    'Platform API: event streams open per account (instance status, logs, operator events; 429 beyond)',
  ),
  apiStreamsPerAddress: setting('RC_API_STREAMS_PER_ADDRESS', positiveInt, 64, 'Platform API: event streams open per client address (429 beyond)'),
  agentLogFileBytes: setting(
    'RC_AGENT_LOG_FILE_BYTES',
    z.coerce.number().int().min(4096),
    20 * 1024 * 1024,
    'Bytes of an instance\'s log file before it rotates (the console\'s log view then starts with "[older output dropped: N bytes]")',
  ),
  agentLogFiles: setting(
    'RC_AGENT_LOG_FILES',
    z.coerce.number().int().min(1).max(10),
    2,
    'Log files kept per instance, the live one included: at most files x RC_AGENT_LOG_FILE_BYTES on disk',
  ),
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

const fileSchema = z.object({ models: z.array(modelEntrySchema).optional() }).catchall(z.unknown());

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
  const config: Config = {
    ...(out as Omit<Config, 'configFile' | 'models' | 'defaultModels'>),
    configFile,
    models,
    defaultModels: models === DEFAULT_SIM_MODELS,
  };
  // Tenant pages never share a cookie site with the console or each other (issue 44, lib/cookie-sites.ts).
  assertCookieSitesApart(publicOriginsOf(config));
  return config;
}

/** Rows of the settings table, for `rc config` and the README. */
export function describeSettings(): { key: string; env: string; default: unknown; doc: string }[] {
  return Object.entries(SETTINGS).map(([key, s]) => ({ key, env: s.env, default: s.default, doc: s.doc }));
}
