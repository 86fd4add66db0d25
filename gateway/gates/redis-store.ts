// The gates in Redis, shared by every gateway replica. The admissions and reconciliations one
// event-loop turn makes for one account go to Redis as one script call (scripts.ts GATE_SCRIPT:
// EVALSHA, EVAL after a NOSCRIPT), applied there in order, each as if it ran alone. An
// admission that has not been answered within the timeout is abandoned: the caller falls back to
// the in-memory gates, and if the abandoned admission did pass later, its reservation is handed
// back.
import type { GateErrorCode } from './codes.js';
import { createHash } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { RcError } from '../../lib/errors.js';
import { TIMED_OUT, within } from '../../lib/within.js';
import { GateKind } from './codes.js';
import { DAY_MS, type Outcome } from './math.js';
import { counters } from './metrics.js';
import { encodeArgs, packed, type EncodedArgs, type RespWriter } from './resp-encode.js';
import { GATE_SCRIPT } from './scripts.js';
import type { Limits } from './limits.js';
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
 * The arguments every call of one account or model repeats, as bytes made once: a batch's head
 * (EVALSHA, the sha, the account's two keys, the day TTL and the account's limits; made anew when
 * the day or the limits change) and each model's first values of a call. The client copies them
 * as they are (one TypedArray#set, some 300 instructions, where writing bytes one at a time costs
 * V8 some 30 instructions each) instead of encoding the same values on every request. Bounded:
 * past this many entries a map starts over.
 */
const MAX_CACHED = 100_000;
interface AccountKeys {
  bucket: Buffer;
  day: number;
  dayKey: Buffer;
  /** [bucket, dayKey]: the script call's KEYS. */
  keys: Buffer[];
  /** The limits of the account's last batch (undefined: none yet, or the day changed since) and its head under them. */
  limits: Limits | undefined;
  head: EncodedArgs;
  /** The account's batch of this turn, until it is sent (or closed by a call of another day or other limits). */
  batch: Batch | undefined;
}

/** A model's first values of each kind of call (scripts.ts: marker, model, now), encoded. */
interface CallPrefixes {
  /** `a`, the model: `now` follows (a clock given to the gate). */
  admission: EncodedArgs;
  /** `a`, the model, an empty `now` (Redis TIME). */
  admissionAtRedisTime: EncodedArgs;
  reconciliation: EncodedArgs;
  reconciliationAtRedisTime: EncodedArgs;
}
const GATE = script(GATE_SCRIPT);
/** Batch.order's entries. */
const ADMIT = 0;
const SETTLE = 1;
/** The script's markers of an admission and a reconciliation (the first of a call's values). */
const ADMISSION = 'a';
const RECONCILIATION = 's';
/** Values per admission and per reconciliation (scripts.ts: marker, model, now, the packed numbers). */
const CALL_LENGTH = 4;
const NO_ARGS: EncodedArgs = { bytes: Buffer.alloc(0), count: 0 };
const EVALSHA = Buffer.from('EVALSHA');
/** Bytes the script returns per admission: 8 doubles. */
const OUTCOME_BYTES = 64;

/** An admission waiting for its account's script call. */
interface PendingAdmission {
  input: AdmitInput;
  resolve(o: Outcome): void;
  reject(err: Error): void;
}

/**
 * The calls of one account, day and set of limits made during one event-loop turn, sent as one script call at
 * the end of the turn (in the same socket write as the turn's other accounts' calls).
 */
interface Batch {
  /** The account's cached keys and head (its `batch` is this one until the turn's calls are sent). */
  account: AccountKeys;
  /** The account's bucket and day keys. */
  keys: Buffer[];
  day: number;
  limits: Limits;
  /**
   * The command's head: EVALSHA, the sha, the keys, then ARGV: the day's TTL and the account's
   * three limits (all encoded once: head), then each call's
   * values, in the order they were made (`order`), written from `admissions` and `settles` when
   * the batch is sent (writeCalls).
   */
  head: EncodedArgs;
  /** ADMIT or SETTLE per call, in the order made. */
  order: number[];
  admissions: PendingAdmission[];
  /** Also kept to be held and replayed if the connection fails under them. */
  settles: SettleInput[];
  /** When its admissions are abandoned (performance.now(); 0 without admissions). */
  deadline: number;
  /** Its reply came (or its call failed): the timeout no longer applies. */
  answered: boolean;
  /** The timeout fired: the callers went to the in-memory gates. */
  abandoned: boolean;
}

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
  /**
   * Runs `task` just before the commands of this event-loop turn are written (RespClient): a
   * command it sends goes in the same write. Clients without it (ioredis) get a setImmediate.
   */
  beforeWrite?(task: () => void): void;
  on(event: 'ready' | 'close', listener: () => void): unknown;
  off(event: 'ready' | 'close', listener: () => void): unknown;
  /**
   * EVALSHA and EVAL answering bulk strings as Buffers (ioredis' Buffer variants of its commands):
   * used when commandThen is not there. Numbers go as their decimal strings and Buffers as their
   * bytes.
   */
  evalshaBuffer?(sha: string | Buffer, numkeys: number, ...args: ScriptArg[]): Promise<unknown>;
  evalBuffer?(script: string, numkeys: number, ...args: ScriptArg[]): Promise<unknown>;
  /**
   * The command whose first arguments are `head` (encoded once), followed by the `count`
   * arguments `more` writes, answered through callbacks with `ctx`, a bulk string reply as its
   * bytes (RespClient); used when present, with head = EVALSHA, the sha, the keys and the day
   * TTL and limits (EVAL and the script after a NOSCRIPT).
   */
  commandThen?<C>(
    head: EncodedArgs,
    count: number,
    more: (w: RespWriter, ctx: C) => void,
    ctx: C,
    onReply: (reply: unknown, ctx: C) => void,
    onError: (err: Error, ctx: C) => void,
  ): void;
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
  /**
   * This turn's batches in the order made (so an account's calls stay in order), each also its
   * account's `batch` until sent. Not a Map cleared every turn: V8's Map#clear leaves the old
   * table pointing to the new one, so once a cleared table had been promoted to the old
   * generation, every later table and the requests its batches reach survived each scavenge
   * through that chain (bench/profile: a third of the Redis gates' extra instructions were the
   * scavenger's, and the whole request objects were promoted some 2 kB a request).
   */
  private readonly turn: Batch[] = [];
  private sendScheduled = false;
  private readonly sendTask = () => this.sendBatches();
  /** Admissions among the calls not yet sent (none: the reconciliations may wait, sendBatches). */
  private turnAdmissions = 0;
  /** Reconciliations held for one loop iteration (sendBatches). */
  private deferred = false;
  private readonly deferredTask = () => this.sendDeferred();
  /**
   * Batches with admissions sent and maybe not yet answered, in the order sent (so by deadline):
   * one timer for all of them, armed for the first one's deadline, instead of a setTimeout and a
   * clearTimeout per batch.
   */
  private readonly waiting: Batch[] = [];
  private timer: NodeJS.Timeout | undefined;
  /** The timer fired and the deadlines are judged after this turn's I/O (timeouts()). */
  private expiryQueued = false;
  private readonly timeoutTask = () => this.timeouts();
  private readonly expireTask = () => this.expire();
  private readonly writeCallsTask = (w: RespWriter, b: Batch) => this.writeCalls(w, b);
  private readonly answeredTask = (reply: unknown, b: Batch) => this.answered(reply, b);
  private readonly failedTask = (err: Error, b: Batch) => this.scriptFailed(err, b);
  private readonly refusedTask = (err: Error, b: Batch) => this.refused(b, err);
  private readonly accountKeys = new Map<number, AccountKeys>();
  private readonly models = new Map<string, CallPrefixes>();
  private readonly onReady = () => this.whenReady();
  private readonly onClose = () => this.setUp(false, 'connection closed');

  /** `redis`: a RespClient, an ioredis client or Cluster (give ioredis `enableOfflineQueue: false`). */
  constructor(
    readonly redis: GateRedis,
    options: RedisGateStoreOptions,
  ) {
    if (/[{}]/.test(options.prefix)) throw new RcError('RC_ERR_CONFIG', 'Gate key prefix must not contain braces (they delimit the hash tag)', 500);
    if (!redis.commandThen && (typeof redis.evalshaBuffer !== 'function' || typeof redis.evalBuffer !== 'function')) {
      throw new RcError('RC_ERR_CONFIG', 'The gate needs a RespClient or an ioredis client (evalshaBuffer, evalBuffer)', 500);
    }
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
      const bucket = Buffer.from(this.bucketKey(accountId));
      const dayKey = Buffer.from(this.dayKey(accountId, day));
      k = { bucket, day, dayKey, keys: [bucket, dayKey], limits: undefined, head: NO_ARGS, batch: undefined };
      this.accountKeys.set(accountId, k);
    } else if (k.day !== day) {
      k.day = day;
      k.dayKey = Buffer.from(this.dayKey(accountId, day));
      k.keys = [k.bucket, k.dayKey];
      k.limits = undefined; // the head holds the day's key
    }
    return k;
  }

  /** A model's first values of a call, as bytes (made once per model). */
  private prefixesOf(model: string): CallPrefixes {
    let p = this.models.get(model);
    if (p === undefined) {
      if (this.models.size >= MAX_CACHED) this.models.clear();
      p = {
        admission: encodeArgs([ADMISSION, model]),
        admissionAtRedisTime: encodeArgs([ADMISSION, model, '']),
        reconciliation: encodeArgs([RECONCILIATION, model]),
        reconciliationAtRedisTime: encodeArgs([RECONCILIATION, model, '']),
      };
      this.models.set(model, p);
    }
    return p;
  }

  /**
   * One atomic admission (sent with the account's other calls of this turn); rejects with
   * GateRedisError on failure or after the timeout.
   */
  admit(i: AdmitInput): Promise<Outcome> {
    return new Promise<Outcome>((resolve, reject) => this.admitThen(i, resolve, reject));
  }

  /**
   * admit() with callbacks: `onOutcome` or `onError` is called once, from the reply's read. The
   * gate's request path uses it so that an admission costs one promise (its own) instead of
   * three, and one microtask hop less.
   */
  admitThen(i: AdmitInput, onOutcome: (o: Outcome) => void, onError: (err: Error) => void): void {
    const b = this.batchOf(i.accountId, i.day, i.limits);
    b.order.push(ADMIT);
    this.turnAdmissions++;
    b.admissions.push({ input: i, resolve: onOutcome, reject: onError });
  }

  /** Fire and forget; when Redis is away the reconciliation waits (bounded) for it to return. */
  settle(i: SettleInput): void {
    if (this.redis.status !== 'ready') {
      this.hold(i);
      return;
    }
    const b = this.batchOf(i.accountId, i.day, i.limits);
    b.order.push(SETTLE);
    b.settles.push(i);
  }

  /** One account's counters for one day (one HGETALL). */
  async usage(accountId: number, day: number): Promise<DayUsage> {
    // This turn's calls go first, so that the read sees the reconciliations made before it.
    if (this.sendScheduled || this.deferred) this.sendAll();
    let raw: Record<string, string>;
    try {
      const ms = Math.max(this.timeoutMs, 1000);
      const answer = await within(this.redis.hgetall(this.dayKey(accountId, day)), ms);
      if (answer === TIMED_OUT) throw new Error(`no answer within ${ms} ms`);
      raw = answer;
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

  /**
   * This turn's batch of an account's calls on `day` under `limits`; the first call of a turn
   * schedules the send.
   */
  private batchOf(accountId: number, day: number, limits: Limits): Batch {
    const keys = this.keysOf(accountId, day);
    let b = keys.batch;
    // A call of another day (a reconciliation after midnight) or under other limits (they
    // changed, or the reservation was made under the old ones) opens a new batch: the calls so
    // far are sent first, as they were made before it.
    if (b !== undefined && b.day === day && sameLimits(b.limits, limits)) return b;
    if (keys.limits === undefined || !sameLimits(keys.limits, limits)) {
      keys.limits = limits;
      keys.head = encodeArgs([EVALSHA, GATE.sha, keys.keys.length, ...keys.keys, ...limitValues(limits)]);
    }
    b = {
      account: keys,
      keys: keys.keys,
      day,
      limits,
      head: keys.head,
      order: [],
      admissions: [],
      settles: [],
      deadline: 0,
      answered: false,
      abandoned: false,
    };
    keys.batch = b;
    this.turn.push(b);
    if (!this.sendScheduled) {
      this.sendScheduled = true;
      if (this.redis.beforeWrite) this.redis.beforeWrite(this.sendTask);
      else setImmediate(this.sendTask);
    }
    return b;
  }

  /**
   * The end of a turn with calls: sends its batches, one script call each. A turn of only
   * reconciliations (nobody waits for their answer) holds them for one more loop iteration
   * instead: the requests that arrive in it (a client's next request, right after the response
   * that ended this turn) then share their script call and socket write, where each would make
   * one. A write and its reply's read cost the gateway some 5k instructions (bench/profile).
   */
  private sendBatches(): void {
    this.sendScheduled = false;
    if (this.turnAdmissions === 0 && !this.deferred && this.turn.length > 0) {
      this.deferred = true;
      setImmediate(this.deferredTask); // queued from this check phase: runs in the next iteration's
      return;
    }
    this.sendAll();
  }

  /** The next iteration's check phase: the held reconciliations go now, unless that iteration's calls are about to send them. */
  private sendDeferred(): void {
    if (this.deferred && !this.sendScheduled) this.sendAll();
  }

  private sendAll(): void {
    this.deferred = false;
    this.turnAdmissions = 0;
    const turn = this.turn;
    for (let k = 0; k < turn.length; k++) {
      const b = turn[k]!;
      if (b.account.batch === b) b.account.batch = undefined;
      this.send(b);
    }
    turn.length = 0;
  }

  private send(b: Batch): void {
    if (b.admissions.length > 0) {
      b.deadline = performance.now() + this.timeoutMs;
      this.waiting.push(b);
      // Unref'd: the connection keeps the process up while a call is out.
      // (While an expiry is queued it re-arms the timer for the first deadline left.)
      if (this.timer === undefined && !this.expiryQueued) this.timer = setTimeout(this.timeoutTask, this.timeoutMs).unref();
    }
    this.run(b);
  }

  /**
   * The timer. It runs in the loop's timers phase, before the poll phase reads what came in since
   * the last one: after a turn that kept the loop busy past a deadline, the reply may be waiting in
   * the socket. So the batches past their deadline are judged after this turn's I/O
   * (setImmediate), and only those still unanswered then are abandoned: the timeout is for Redis
   * being slow, not for this process being busy (under callgrind, where the gateway runs some 50
   * times slower, turns of over 50 ms sent a fifth to half of the admissions to memory).
   */
  private timeouts(): void {
    this.timer = undefined;
    this.expiryQueued = true;
    setImmediate(this.expireTask);
  }

  /** Abandons the batches past their deadline (after the turn's I/O), then waits for the next one's. */
  private expire(): void {
    this.expiryQueued = false;
    const waiting = this.waiting;
    const now = performance.now();
    while (waiting.length > 0) {
      const b = waiting[0]!;
      if (!b.answered) {
        if (b.deadline > now) {
          this.timer = setTimeout(this.timeoutTask, Math.ceil(b.deadline - now)).unref();
          return;
        }
        this.abandon(b);
      }
      waiting.shift();
    }
  }

  /** A batch was answered (or failed): its timeout no longer applies; answered ones are dropped from the head of `waiting`. */
  private settled(b: Batch): void {
    b.answered = true;
    const waiting = this.waiting;
    while (waiting.length > 0 && waiting[0]!.answered) waiting.shift();
  }

  /** The admissions' timeout: their callers go to the in-memory gates. */
  private abandon(b: Batch): void {
    b.abandoned = true;
    counters.redisTimeouts++;
    this.failed(`admission took over ${this.timeoutMs} ms`);
    const err = new GateRedisError(`Redis did not answer within ${this.timeoutMs} ms`);
    for (let k = 0; k < b.admissions.length; k++) b.admissions[k]!.reject(err);
  }

  private answered(reply: unknown, b: Batch): void {
    const admissions = b.admissions;
    const outcomes = toOutcomes(reply, admissions.length);
    if (b.abandoned) {
      // Too late: the callers went to the in-memory gates. Hand the reservations back.
      if (outcomes) for (let k = 0; k < outcomes.length; k++) this.handBack(admissions[k]!.input, outcomes[k]!);
      return;
    }
    this.settled(b);
    if (outcomes) {
      // An answer in time is Redis working again: after a timeout or an error reply the store is
      // marked down, and no reconnect follows when the connection itself stayed up, so without
      // this the gauge (and the log's "deciding in memory") would stay down for good. The
      // back-off ends too: the gates decide in Redis again from the next request.
      this.backoffUntil = 0;
      this.setUp(true, 'answered');
      for (let k = 0; k < outcomes.length; k++) admissions[k]!.resolve(outcomes[k]!);
    } else {
      const err = new GateRedisError(`Unexpected reply from the gate script: ${JSON.stringify(reply)}`);
      for (let k = 0; k < admissions.length; k++) admissions[k]!.reject(err);
    }
  }

  private refused(b: Batch, err: Error): void {
    this.failed(err.message);
    if (!b.abandoned) {
      this.settled(b);
      const e = new GateRedisError(`Redis admission failed: ${err.message}`, err);
      for (let k = 0; k < b.admissions.length; k++) b.admissions[k]!.reject(e);
    }
    // An error reply would fail again: only a connection failure is worth a replay.
    if (err.name !== 'ReplyError') for (let k = 0; k < b.settles.length; k++) this.hold(b.settles[k]!);
  }

  /** Returns the reservation of an admission that passed after its caller stopped waiting. */
  private handBack(i: AdmitInput, o: Outcome): void {
    if (o.gate !== GateKind.None) return;
    this.settle({ ...i, estimate: o.estimate, inputTokens: 0, outputTokens: 0, cachedTokens: 0 });
  }

  /** The batch's script call: EVALSHA, then EVAL when Redis does not have the script (NOSCRIPT). */
  private run(b: Batch): void {
    counters.redisCalls++;
    const redis = this.redis;
    // Through functions made once, with the batch as their context: no closures per batch.
    if (redis.commandThen) redis.commandThen(b.head, b.order.length * CALL_LENGTH, this.writeCallsTask, b, this.answeredTask, this.failedTask);
    else
      redis.evalshaBuffer!(GATE.sha, 2, ...b.keys, ...limitValues(b.limits), ...this.callValues(b)).then(
        (reply) => this.answered(reply, b),
        (err: unknown) => this.scriptFailed(asError(err), b),
      );
  }

  /** The batch's EVALSHA failed: EVAL when Redis did not have the script, else the batch failed. */
  private scriptFailed(err: Error, b: Batch): void {
    if (!err.message.startsWith('NOSCRIPT')) return this.refused(b, err);
    counters.redisCalls++;
    // Also caches the script in Redis.
    const redis = this.redis;
    if (redis.commandThen) {
      const head = encodeArgs(['EVAL', GATE.src, b.keys.length, ...b.keys, ...limitValues(b.limits)]);
      redis.commandThen(head, b.order.length * CALL_LENGTH, this.writeCallsTask, b, this.answeredTask, this.refusedTask);
    } else
      redis.evalBuffer!(GATE.src, 2, ...b.keys, ...limitValues(b.limits), ...this.callValues(b)).then(
        (reply) => this.answered(reply, b),
        (e: unknown) => this.refused(b, asError(e)),
      );
  }

  /**
   * Appends a batch's calls to its script call (RespClient.commandThen), the same values as
   * callValues() gives: each value through the writer method of its type, the marker and an empty
   * `now` as bytes encoded once.
   */
  private writeCalls(w: RespWriter, b: Batch): void {
    const { order, admissions, settles } = b;
    for (let k = 0, a = 0, s = 0; k < order.length; k++) {
      if (order[k] === ADMIT) {
        const i = admissions[a++]!.input;
        const p = this.prefixesOf(i.model);
        if (i.nowMs === undefined) w.encodedArgs(p.admissionAtRedisTime);
        else {
          w.encodedArgs(p.admission);
          w.numberArg(i.nowMs);
        }
        w.packedArg(i.estimate, i.msToNextDay, i.input, i.defaultOutput ? 1 : 0, i.recountBelow);
      } else {
        const i = settles[s++]!;
        const p = this.prefixesOf(i.model);
        if (i.nowMs === undefined) w.encodedArgs(p.reconciliationAtRedisTime);
        else {
          w.encodedArgs(p.reconciliation);
          w.numberArg(i.nowMs);
        }
        w.packedArg(i.estimate, i.inputTokens, i.outputTokens, i.cachedTokens, i.hour);
      }
    }
  }

  /** A batch's calls as the script's values (for clients without commandThen: ioredis). */
  private callValues(b: Batch): ScriptArg[] {
    const out: ScriptArg[] = [];
    const { order, admissions, settles } = b;
    for (let k = 0, a = 0, s = 0; k < order.length; k++) {
      if (order[k] === ADMIT) {
        const i = admissions[a++]!.input;
        out.push(ADMISSION, i.model, i.nowMs ?? '', packed(i.estimate, i.msToNextDay, i.input, i.defaultOutput ? 1 : 0, i.recountBelow));
      } else {
        const i = settles[s++]!;
        out.push(RECONCILIATION, i.model, i.nowMs ?? '', packed(i.estimate, i.inputTokens, i.outputTokens, i.cachedTokens, i.hour));
      }
    }
    return out;
  }

  private whenReady(): void {
    this.backoffUntil = 0;
    // Preload the script so the first EVALSHA finds it (EVAL covers a race with a flush).
    this.redis.script('LOAD', GATE.src).catch(() => {});
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

/** A batch's first arguments: the day hashes' TTL and the account's limits. */
function limitValues(l: Limits): number[] {
  return [DAY_TTL_SEC, l.rpm, l.tpm, l.dailyTokens];
}

function sameLimits(a: Limits, b: Limits): boolean {
  return a === b || (a.rpm === b.rpm && a.tpm === b.tpm && a.dailyTokens === b.dailyTokens);
}

/**
 * The `count` admissions' outcomes of a script reply (8 little-endian doubles each, scripts.ts),
 * or undefined when it is not that. The reply may be a view of the client's read buffer: read
 * at once.
 */
function toOutcomes(reply: unknown, count: number): Outcome[] | undefined {
  if (!Buffer.isBuffer(reply) || reply.length !== count * OUTCOME_BYTES) return undefined;
  const out: Outcome[] = new Array(count);
  if (count === 0) return out;
  const v = new DataView(reply.buffer, reply.byteOffset, reply.length);
  for (let k = 0, at = 0; k < count; k++, at += OUTCOME_BYTES) {
    out[k] = {
      gate: v.getFloat64(at, true),
      waitMs: v.getFloat64(at + 8, true),
      remainingRequests: v.getFloat64(at + 16, true),
      remainingTokens: v.getFloat64(at + 24, true),
      resetRequestsMs: v.getFloat64(at + 32, true),
      resetTokensMs: v.getFloat64(at + 40, true),
      maxOutput: v.getFloat64(at + 48, true),
      estimate: v.getFloat64(at + 56, true),
    };
  }
  return out;
}

function asError(err: unknown): Error {
  return err instanceof Error ? err : new Error(String(err));
}
