// The attempt limits in Redis (issue #43), shared by every control plane on it: one script call
// per decision (limit-scripts.ts), atomic there, so N control planes allow the limits once
// (LiteLLM #25374: budgets kept per replica allowed N times them). Calls fail (reject) when Redis
// does; shared-limits.ts then lets this process's memory decide.
//
// Keys, under the platform's Redis prefix (RC_GATE_KEY_PREFIX), each part URI-encoded so that no
// e-mail or address can make another's key:
//   <prefix>auth:signin:<address>          sign-in attempts per address (bucket)
//   <prefix>auth:failures:<email>          failures per account, all addresses (bucket)
//   <prefix>auth:pair:<email>:<address>    a pair's failures and wait {f, until, at}
//   <prefix>auth:known:<email>:<address>   a pair's last success (known address)
//   <prefix>auth:signup:<address>          sign-ups and verification mails per address (bucket)
//   <prefix>auth:coupon:account:<id>       redemption attempts per account (bucket)
//   <prefix>auth:coupon:address:<address>  redemption attempts per address (bucket)
// One Redis, not a Cluster: a script's keys (an account's and an address's) share no slot.
import { createHash } from 'node:crypto';
import type { Redis } from 'ioredis';
import type { Clock } from '../../lib/clock.js';
import { bucketRates, type AttemptLimits, type AttemptLimitSettings, type BucketRate } from './attempt-limits.js';
import { ADMIT_SCRIPT, FAILED_SCRIPT, SUCCEEDED_SCRIPT, TAKE_SCRIPT } from './limit-scripts.js';
import { addressKey, FREE_FAILURES, KNOWN_ADDRESS_TTL_MS, MAX_PAIR_WAIT_MS, PAIR_FORGET_MS } from './rate-limit.js';

interface Script {
  src: string;
  sha: string;
}
const script = (src: string): Script => ({ src, sha: createHash('sha1').update(src).digest('hex') });
const TAKE = script(TAKE_SCRIPT);
const ADMIT = script(ADMIT_SCRIPT);
const FAILED = script(FAILED_SCRIPT);
const SUCCEEDED = script(SUCCEEDED_SCRIPT);

const part = (s: string): string => encodeURIComponent(s);

export interface RedisAttemptLimitOptions {
  /** Prefix of the keys (RC_GATE_KEY_PREFIX). */
  prefix: string;
  settings: AttemptLimitSettings;
  /** Times from this clock (tests); none: Redis TIME, one clock for every control plane. */
  clock?: Clock | undefined;
}

export class RedisAttemptLimits implements AttemptLimits {
  private readonly prefix: string;
  private readonly rates: ReturnType<typeof bucketRates>;
  private readonly clock: Clock | undefined;

  /** `redis`: an ioredis client (give it `enableOfflineQueue: false`: a call then fails at once while Redis is away). */
  constructor(
    readonly redis: Redis,
    o: RedisAttemptLimitOptions,
  ) {
    this.prefix = `${o.prefix}auth:`;
    this.rates = bucketRates(o.settings);
    this.clock = o.clock;
  }

  async admitSignIn(email: string, clientAddress: string): Promise<number> {
    const { pair, known } = this.pairKeys(email, clientAddress);
    const { failuresPerAccount: f, signInPerAddress: a } = this.rates;
    const keys = [pair, known, this.key('failures', email), this.key('signin', addressKey(clientAddress))];
    return Number(await this.run(ADMIT, keys, [KNOWN_ADDRESS_TTL_MS, f.capacity, f.periodMs, a.capacity, a.periodMs]));
  }

  async signInFailed(email: string, clientAddress: string): Promise<void> {
    const { pair } = this.pairKeys(email, clientAddress);
    const f = this.rates.failuresPerAccount;
    await this.run(FAILED, [pair, this.key('failures', email)], [FREE_FAILURES, MAX_PAIR_WAIT_MS, PAIR_FORGET_MS, f.capacity, f.periodMs]);
  }

  async signInSucceeded(email: string, clientAddress: string): Promise<void> {
    const { pair, known } = this.pairKeys(email, clientAddress);
    await this.run(SUCCEEDED, [pair, known], [KNOWN_ADDRESS_TTL_MS]);
  }

  takeSignUp(clientAddress: string): Promise<number> {
    return this.take([[this.key('signup', addressKey(clientAddress)), this.rates.signUpPerAddress]]);
  }

  takeRedemption(accountId: number, clientAddress: string): Promise<number> {
    return this.take([
      [this.key('coupon:account', String(accountId)), this.rates.couponsPerAccount],
      [this.key('coupon:address', addressKey(clientAddress)), this.rates.couponsPerAddress],
    ]);
  }

  /** A token from every bucket or from none: 0, or the longest wait. */
  private async take(buckets: [string, BucketRate][]): Promise<number> {
    const args = buckets.flatMap(([, r]) => [r.capacity, r.periodMs]);
    return Number(
      await this.run(
        TAKE,
        buckets.map(([k]) => k),
        args,
      ),
    );
  }

  private key(kind: string, id: string): string {
    return `${this.prefix}${kind}:${part(id)}`;
  }

  private pairKeys(email: string, clientAddress: string): { pair: string; known: string } {
    const id = `${part(email)}:${part(addressKey(clientAddress))}`;
    return { pair: `${this.prefix}pair:${id}`, known: `${this.prefix}known:${id}` };
  }

  /** EVALSHA, and EVAL once when Redis does not hold the script (a restart, SCRIPT FLUSH). ARGV[1] is `now` ('' for Redis TIME). */
  private async run(s: Script, keys: string[], args: (string | number)[]): Promise<unknown> {
    const argv = [this.clock ? String(this.clock.now()) : '', ...args];
    try {
      return await this.redis.evalsha(s.sha, keys.length, ...keys, ...argv);
    } catch (err) {
      if (!(err instanceof Error) || !err.message.startsWith('NOSCRIPT')) throw err;
      return this.redis.eval(s.src, keys.length, ...keys, ...argv);
    }
  }
}
