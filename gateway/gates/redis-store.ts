// The gates in Redis, shared by every gateway replica. One script call (EVALSHA, EVAL after a
// NOSCRIPT) per admission and one per reconciliation. A call that has not answered within the
// timeout is abandoned: the caller falls back to the in-memory gates, and if the abandoned
// admission did pass later, its reservation is handed back.
import type { GateErrorCode } from './codes.js';
import { createHash } from 'node:crypto';
import { RcError } from '../../lib/errors.js';
import { GateKind } from './codes.js';
import { DAY_MS, type Outcome } from './math.js';
import { counters } from './metrics.js';
import { ADMIT_SCRIPT, SETTLE_SCRIPT } from './scripts.js';
import type { AdmitInput, DayUsage, GateStore, ModelDayUsage, ModelHours, SettleInput } from './store.js';
import { emptyDayUsage, emptyModelDayUsage, emptyModelHours, HOURS_PER_DAY } from './store.js';

/** A gate call to Redis failed or timed out. */
export class GateRedisError extends RcError {
  constructor(message: string, cause?: unknown) {
    super('RC_ERR_GATE_REDIS' satisfies GateErrorCode, message, 503, { cause });
  }
}

type ScriptArg = string | number | Buffer;

interface Script {
  src: string;
  /** The script's SHA-1 in hex, as bytes (EVALSHA's first argument, the same on every call). */
  sha: Buffer;
}
const script = (src: string): Script => ({ src, sha: Buffer.from(createHash('sha1').update(src).digest('hex'), 'latin1') });

/**
 * The arguments every call of one account or model repeats, as bytes made once: the account's
 * two keys (the day's key made anew when the day changes) and model names. The client copies them
 * as they are instead of encoding the same strings on every request. Bounded: past this many
 * entries a map starts over.
 */
const MAX_CACHED = 100_000;
interface AccountKeys {
  bucket: Buffer;
  day: number;
  dayKey: Buffer;
}
const ADMIT = script(ADMIT_SCRIPT);
const SETTLE = script(SETTLE_SCRIPT);

/** Day hashes live a week past their day, for readUsage. */
const DAY_TTL_SEC = (8 * DAY_MS) / 1000;
/** After a failure, skip Redis this long (unless it reports ready again sooner). */
const BACKOFF_MS = 1000;
/** Reconciliations held while Redis is away, at most. */
const MAX_PENDING_SETTLES = 10_000;

/**
 * What the store needs of a Redis client. The gate's own RespClient (resp-client.ts) and an
 * ioredis client or Cluster handed to createGate (the keys of one account share a slot) both fit.
 */
export interface GateRedis {
  /** 'ready' while commands can be sent. */
  readonly status: string;
  on(event: 'ready' | 'close', listener: () => void): unknown;
  off(event: 'ready' | 'close', listener: () => void): unknown;
  /** Numbers go as their decimal strings (String(n)) and Buffers as their bytes, as both clients send them. */
  evalsha(sha: string | Buffer, numkeys: number, ...args: ScriptArg[]): Promise<unknown>;
  eval(script: string, numkeys: number, ...args: ScriptArg[]): Promise<unknown>;
  script(subcommand: 'LOAD', source: string): Promise<unknown>;
  hgetall(key: string): Promise<Record<string, string>>;
}

export interface RedisGateStoreOptions {
  /** Key prefix (RC_GATE_KEY_PREFIX); keys are `<prefix>{acct:<id>}:b` and `<prefix>{acct:<id>}:d:<day>`. */
  prefix: string;
  /** Longest wait for an admission (RC_GATE_REDIS_TIMEOUT_MS). */
  timeoutMs: number;
  /** Called when the store becomes usable (true) or unusable (false). */
  onState?: (up: boolean, reason: string) => void;
}

export class RedisGateStore implements GateStore {
  private readonly prefix: string;
  private readonly timeoutMs: number;
  private readonly onState: (up: boolean, reason: string) => void;
  private backoffUntil = 0;
  private up = false;
  private pending: SettleInput[] = [];
  private readonly accountKeys = new Map<number, AccountKeys>();
  private readonly modelNames = new Map<string, Buffer>();
  private readonly onReady = () => this.whenReady();
  private readonly onClose = () => this.setUp(false, 'connection closed');

  /** `redis`: a RespClient, an ioredis client or Cluster (give ioredis `enableOfflineQueue: false`). */
  constructor(
    readonly redis: GateRedis,
    options: RedisGateStoreOptions,
  ) {
    if (/[{}]/.test(options.prefix)) throw new RcError('RC_ERR_CONFIG', 'Gate key prefix must not contain braces (they delimit the hash tag)', 500);
    this.prefix = options.prefix;
    this.timeoutMs = options.timeoutMs;
    this.onState = options.onState ?? (() => {});
    redis.on('ready', this.onReady);
    redis.on('close', this.onClose);
    if (redis.status === 'ready') this.whenReady();
  }

  /** True when admissions should go to Redis now. */
  get usable(): boolean {
    if (this.redis.status !== 'ready') return false;
    if (this.backoffUntil !== 0) {
      if (Date.now() < this.backoffUntil) return false;
      this.backoffUntil = 0;
    }
    return true;
  }

  bucketKey(accountId: number): string {
    return `${this.prefix}{acct:${accountId}}:b`;
  }
  dayKey(accountId: number, day: number): string {
    return `${this.prefix}{acct:${accountId}}:d:${day}`;
  }

  /** The account's bucket and day keys as bytes (made once per account and day). */
  private keysOf(accountId: number, day: number): AccountKeys {
    let k = this.accountKeys.get(accountId);
    if (k === undefined) {
      if (this.accountKeys.size >= MAX_CACHED) this.accountKeys.clear();
      k = { bucket: Buffer.from(this.bucketKey(accountId)), day, dayKey: Buffer.from(this.dayKey(accountId, day)) };
      this.accountKeys.set(accountId, k);
    } else if (k.day !== day) {
      k.day = day;
      k.dayKey = Buffer.from(this.dayKey(accountId, day));
    }
    return k;
  }

  /** A model name as bytes (made once per name). */
  private modelName(model: string): Buffer {
    let b = this.modelNames.get(model);
    if (b === undefined) {
      if (this.modelNames.size >= MAX_CACHED) this.modelNames.clear();
      b = Buffer.from(model);
      this.modelNames.set(model, b);
    }
    return b;
  }

  /** One atomic admission; rejects with GateRedisError on failure or after the timeout. */
  admit(i: AdmitInput): Promise<Outcome> {
    // Numbers as numbers: the client writes their digits (String(n) for anything but a safe integer).
    const args = [
      i.nowMs ?? '',
      i.limits.rpm,
      i.limits.tpm,
      i.limits.dailyTokens,
      i.estimate,
      this.modelName(i.model),
      i.msToNextDay,
      DAY_TTL_SEC,
      i.input,
      i.defaultOutput ? 1 : 0,
    ];
    const call = this.run(ADMIT, this.keysOf(i.accountId, i.day), args);
    return new Promise<Outcome>((resolve, reject) => {
      let settled = false;
      const timer = setTimeout(() => {
        settled = true;
        counters.redisTimeouts++;
        this.failed(`admission took over ${this.timeoutMs} ms`);
        reject(new GateRedisError(`Redis did not answer within ${this.timeoutMs} ms`));
      }, this.timeoutMs);
      call.then(
        (reply) => {
          if (settled) {
            // Too late: the caller went to the in-memory gates. Hand the reservation back.
            const late = toOutcome(reply);
            if (late && late.gate === GateKind.None) {
              this.settle({ ...i, estimate: late.estimate, inputTokens: 0, outputTokens: 0, cachedTokens: 0 });
            }
            return;
          }
          settled = true;
          clearTimeout(timer);
          const o = toOutcome(reply);
          if (o) resolve(o);
          else reject(new GateRedisError(`Unexpected reply from the admission script: ${JSON.stringify(reply)}`));
        },
        (err: unknown) => {
          if (settled) return;
          settled = true;
          clearTimeout(timer);
          this.failed((err as Error).message);
          reject(new GateRedisError(`Redis admission failed: ${(err as Error).message}`, err));
        },
      );
    });
  }

  /** Fire and forget; when Redis is away the reconciliation waits (bounded) for it to return. */
  settle(i: SettleInput): void {
    if (this.redis.status !== 'ready') {
      this.hold(i);
      return;
    }
    const args = [
      i.nowMs ?? '',
      i.limits.rpm,
      i.limits.tpm,
      i.estimate,
      i.inputTokens,
      i.outputTokens,
      this.modelName(i.model),
      DAY_TTL_SEC,
      i.cachedTokens,
      i.hour,
    ];
    this.run(SETTLE, this.keysOf(i.accountId, i.day), args).catch((err: unknown) => {
      this.failed((err as Error).message);
      // An error reply would fail again: only a connection failure is worth a replay.
      if ((err as Error).name !== 'ReplyError') this.hold(i);
    });
  }

  /** One account's counters for one day (one HGETALL). */
  async usage(accountId: number, day: number): Promise<DayUsage> {
    let raw: Record<string, string>;
    try {
      raw = await withTimeout(this.redis.hgetall(this.dayKey(accountId, day)), Math.max(this.timeoutMs, 1000));
    } catch (err) {
      counters.redisErrors++;
      throw new GateRedisError(`Cannot read model usage from Redis: ${(err as Error).message}`, err);
    }
    const out = emptyDayUsage();
    const model = (name: string): ModelDayUsage => {
      let m = out.byModel.get(name);
      if (!m) out.byModel.set(name, (m = emptyModelDayUsage()));
      return m;
    };
    // `ht:<hour>:<model>` / `hn:<hour>:<model>`: the model name may itself hold colons.
    const hourly = (field: string, n: number, key: keyof ModelHours): void => {
      const sep = field.indexOf(':', 3);
      const hour = Number(field.slice(3, sep));
      if (sep <= 3 || !Number.isInteger(hour) || hour < 0 || hour >= HOURS_PER_DAY) return;
      const name = field.slice(sep + 1);
      let h = out.byModelHour.get(name);
      if (!h) out.byModelHour.set(name, (h = emptyModelHours()));
      h[key][hour] = n;
    };
    for (const field in raw) {
      const n = Number(raw[field]) || 0;
      if (field === 'tokens') out.tokens = n;
      else if (field === 'reserved') out.reserved = n;
      else if (field === 'requests') out.requests = n;
      else if (field.startsWith('n:')) model(field.slice(2)).requests = n;
      else if (field.startsWith('i:')) model(field.slice(2)).input_tokens = n;
      else if (field.startsWith('o:')) model(field.slice(2)).output_tokens = n;
      else if (field.startsWith('c:')) model(field.slice(2)).cached_input_tokens = n;
      else if (field.startsWith('ht:')) hourly(field, n, 'tokens');
      else if (field.startsWith('hn:')) hourly(field, n, 'requests');
    }
    return out;
  }

  /** Reconciliations waiting for Redis. */
  get pendingSettles(): number {
    return this.pending.length;
  }

  /** Stops listening to the client (does not close it). */
  detach(): void {
    this.redis.off('ready', this.onReady);
    this.redis.off('close', this.onClose);
  }

  private run(s: Script, keys: AccountKeys, args: ScriptArg[]): Promise<unknown> {
    counters.redisCalls++;
    const { bucket, dayKey } = keys;
    return this.redis.evalsha(s.sha, 2, bucket, dayKey, ...args).catch((err: unknown) => {
      if (!(err instanceof Error) || !err.message.startsWith('NOSCRIPT')) throw err;
      counters.redisCalls++;
      return this.redis.eval(s.src, 2, bucket, dayKey, ...args); // also caches the script in Redis
    });
  }

  private whenReady(): void {
    this.backoffUntil = 0;
    // Preload both scripts so the first EVALSHA finds them (EVAL covers a race with a flush).
    Promise.all([this.redis.script('LOAD', ADMIT.src), this.redis.script('LOAD', SETTLE.src)]).catch(() => {});
    this.setUp(true, 'ready');
    const held = this.pending;
    this.pending = [];
    for (const s of held) this.settle(s);
  }

  private failed(reason: string): void {
    counters.redisErrors++;
    this.backoffUntil = Date.now() + BACKOFF_MS;
    this.setUp(false, reason);
  }

  private setUp(up: boolean, reason: string): void {
    if (up === this.up) return;
    this.up = up;
    this.onState(up, reason);
  }

  private hold(i: SettleInput): void {
    counters.settleQueued++;
    if (this.pending.length >= MAX_PENDING_SETTLES) {
      this.pending.shift();
      counters.settleDropped++;
    }
    this.pending.push(i);
  }
}

function toOutcome(reply: unknown): Outcome | undefined {
  if (!Array.isArray(reply) || reply.length !== 8 || !reply.every((v) => typeof v === 'number')) return undefined;
  const [gate, waitMs, remainingRequests, remainingTokens, resetRequestsMs, resetTokensMs, maxOutput, estimate] = reply as number[];
  return {
    gate: gate!,
    waitMs: waitMs!,
    remainingRequests: remainingRequests!,
    remainingTokens: remainingTokens!,
    resetRequestsMs: resetRequestsMs!,
    resetTokensMs: resetTokensMs!,
    maxOutput: maxOutput!,
    estimate: estimate!,
  };
}

function withTimeout<T>(p: Promise<T>, ms: number): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no answer within ${ms} ms`)), ms);
    p.then(
      (v) => {
        clearTimeout(timer);
        resolve(v);
      },
      (e: unknown) => {
        clearTimeout(timer);
        reject(e);
      },
    );
  });
}
