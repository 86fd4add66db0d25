// The choice among a model's backends for the policies other than 'least-loaded' (which stays in
// UpstreamRegistry.pick, as it was): 'prefix', routed for the backends' KV cache, and
// 'round-robin'. See gateway/README.md "Routing".
//
// 'prefix' learns from its own routing history which backend was sent which prefix (a bounded
// PrefixTable of prefix hash -> backends) and sends a request to the healthy, not overloaded
// backend that holds the longest prefix of it; among several holders, and when no one holds
// any, the conversation key decides by rendezvous hashing, so gateway replicas that never talk
// agree; with bounded load (consistent hashing with bounded loads): a backend whose in-flight
// count would pass the ceiling max(routeMinCeiling, ceil((1 + epsilon) * (total in flight + 1) /
// healthy backends)) takes no new conversation, which spreads a hot prefix and bounds the
// imbalance; a backend that holds a request's prefix keeps it up to a looser ceiling
// (routeKeepEpsilon), since moving a conversation costs its cached history.
import { REASON_FALLBACK, REASON_KEY, REASON_LOAD, REASON_PREFIX, REASON_ROTATE, type RouteSeries } from '../metrics.js';
import { fnv1a, mix } from './prefix-key.js';
import { PrefixTable } from './prefix-table.js';
import type { RouteHint } from './route-hint.js';

export type RoutingPolicy = 'prefix' | 'least-loaded' | 'round-robin';

/** What a router reads of an upstream (upstreams.ts Upstream). */
export interface RoutedUpstream {
  /** Per-upstream seed of rendezvous hashing (the same on every replica: from the URL). */
  readonly seed: number;
  readonly inflight: number;
  /** Times the upstream was taken out: a change means its cache may be gone. */
  readonly ejections: number;
  /** vLLM's `num_requests_waiting` as last scraped (load-scraper.ts), and when (epoch ms; 0: never). */
  readonly waiting: number;
  readonly waitingAt: number;
  healthy(now: number): boolean;
}

export interface ModelRouter {
  readonly policy: 'prefix' | 'round-robin';
  /** Index in `ups` of the upstream for this request, or -1 when none is healthy and untried. Counts the choice. */
  choose(ups: readonly RoutedUpstream[], route: RouteHint | string | undefined, skip: readonly RoutedUpstream[] | undefined, now: number): number;
  /** The request was sent to `u`: its prefix is there now. */
  learn(route: RouteHint | string | undefined, ups: readonly RoutedUpstream[], u: RoutedUpstream): void;
}

export interface RouterOptions {
  /** Entries of a model's prefix table (memory: 12 bytes each). */
  routeEntries: number;
  /** Bounded load's slack: a backend takes a request while its in-flight count stays within (1 + epsilon) times the mean. */
  routeEpsilon: number;
  /**
   * The bounded-load ceiling is never below this: a GPU serves a few requests at once in one
   * batch at no cost to each, so a backend with fewer in flight is not moved away from (which
   * keeps replicas, whose in-flight counts differ, agreeing at low load).
   */
  routeMinCeiling: number;
  /**
   * The slack for a request whose prefix a backend holds: moving it would recompute its history,
   * so its backend keeps it until its in-flight count passes (1 + routeKeepEpsilon) times the mean.
   */
  routeKeepEpsilon: number;
  /** More waiting requests than this (vLLM's metric, when scraped) make a backend overloaded. */
  routeMaxWaiting: number;
  /** How often upstreams' /metrics are read (0: never); a reading older than three periods is not used. */
  metricsIntervalMs: number;
}

/** Units looked up one by one back from the request's last; below, only those learned (powers of two). */
const LOOKBACK = 64;
/** Prefix bits exist for the first 32 upstreams of a model; later ones are chosen by key and load only. */
const MAX_BITS = 32;

/** Slot states of the scratch array. */
const OUT = 0;
const FULL = 1;
/** Room only for a request whose prefix it holds (between the two ceilings). */
const KEEP = 2;
const ROOM = 3;

/** The unit looked up after k once below the lookback window: learn()'s powers of two, then the first unit; -1 when done. */
function below(k: number, stop: number): number {
  let p = 1;
  while (p * 2 - 1 < k) p *= 2; // the largest p with p - 1 < k
  if (p - 1 > stop && p - 1 < k) return p - 1;
  return k > stop ? stop : -1;
}

/** Rendezvous score of `key` on `u`: the highest wins (the same on every replica). */
function score(key: number, u: RoutedUpstream): number {
  return mix(key ^ u.seed);
}

/** The router of a model with several backends, or undefined for 'least-loaded' (UpstreamRegistry.pick). */
export function createRouter(policy: RoutingPolicy, upstreams: readonly string[], opts: RouterOptions, series: RouteSeries): ModelRouter | undefined {
  const choices = upstreams.map((url) => series.upstream(url));
  if (policy === 'round-robin') return new RoundRobinRouter(choices);
  if (policy === 'prefix') return new PrefixRouter(choices, opts, series);
  return undefined;
}

/** Each healthy upstream in turn. */
export class RoundRobinRouter implements ModelRouter {
  readonly policy = 'round-robin';
  private next = 0;

  constructor(private readonly choices: readonly Float64Array[]) {}

  choose(ups: readonly RoutedUpstream[], _route: unknown, skip: readonly RoutedUpstream[] | undefined, now: number): number {
    const n = ups.length;
    for (let k = 0; k < n; k++) {
      const i = (this.next + k) % n;
      const u = ups[i]!;
      if (!u.healthy(now) || skip?.includes(u)) continue;
      this.next = i + 1;
      this.choices[i]![REASON_ROTATE]!++;
      return i;
    }
    return -1;
  }

  learn(): void {}
}

/** Routed for the KV cache: longest known prefix, else the conversation key, with bounded load. */
export class PrefixRouter implements ModelRouter {
  readonly policy = 'prefix';
  readonly table: PrefixTable;
  /** Each upstream's `ejections` when its table bits were last valid. */
  private readonly seen: Uint32Array;
  /** Scratch per upstream for one choice: OUT, FULL, KEEP or ROOM. */
  private readonly state: Uint8Array;
  /** KEEP or ROOM upstreams among the first 32, as bits (set by scan). */
  private keepBits = 0;
  private rotor = 0;
  private readonly fresh: number;

  constructor(
    private readonly choices: readonly Float64Array[],
    private readonly opts: RouterOptions,
    private readonly series: RouteSeries,
  ) {
    this.table = new PrefixTable(opts.routeEntries);
    this.seen = new Uint32Array(choices.length);
    this.state = new Uint8Array(choices.length);
    this.fresh = 3 * opts.metricsIntervalMs;
  }

  choose(ups: readonly RoutedUpstream[], route: RouteHint | string | undefined, skip: readonly RoutedUpstream[] | undefined, now: number): number {
    if (!this.scan(ups, skip, now)) return -1;
    let i: number;
    if (typeof route === 'object') {
      i = this.holder(ups, route);
      if (i >= 0) return i;
      i = this.byKey(ups, route.key);
    } else if (route !== undefined && route !== '') i = this.byKey(ups, fnv1a(route));
    else i = this.leastLoaded(ups, REASON_LOAD);
    return i;
  }

  learn(route: RouteHint | string | undefined, ups: readonly RoutedUpstream[], u: RoutedUpstream): void {
    if (typeof route !== 'object') return;
    const i = ups.indexOf(u);
    if (i < 0 || i >= MAX_BITS) return;
    const bit = 1 << i;
    const units = route.units;
    const last = units.length - 1;
    // The last unit (what the next turn extends), the conversation's first, and the powers of two
    // between (a shorter shared run is found within a factor of two): O(log n) entries a request.
    this.table.add(units[last]!, bit);
    if (route.minUnit < last) this.table.add(units[route.minUnit]!, bit);
    for (let p = 1; p - 1 < last; p <<= 1) if (p - 1 > route.minUnit) this.table.add(units[p - 1]!, bit);
  }

  /** Marks each upstream OUT, FULL, KEEP or ROOM; false when none is in. Forgets an upstream taken out since. */
  private scan(ups: readonly RoutedUpstream[], skip: readonly RoutedUpstream[] | undefined, now: number): boolean {
    const n = ups.length;
    const state = this.state;
    let healthy = 0;
    let total = 0;
    for (let i = 0; i < n; i++) {
      const u = ups[i]!;
      // Taken out (refused, failing): its cache is presumed gone; it learns again when back.
      if (u.ejections !== this.seen[i]) this.forget(i, u.ejections);
      const ok = u.healthy(now) && !skip?.includes(u);
      state[i] = ok ? ROOM : OUT;
      if (ok) {
        healthy++;
        total += u.inflight;
      }
    }
    if (healthy === 0) return false;
    const ceiling = this.ceiling(this.opts.routeEpsilon, total, healthy);
    const keepCeiling = this.ceiling(this.opts.routeKeepEpsilon, total, healthy);
    let bits = 0;
    for (let i = 0; i < n; i++) {
      if (state[i] === OUT) continue;
      const u = ups[i]!;
      // Room when one more stays within the ceiling. Some backend always has room: were all at
      // the ceiling, total >= healthy * ceiling >= (1 + epsilon) * (total + 1) > total.
      if (u.inflight >= keepCeiling || this.queued(u, now)) state[i] = FULL;
      else {
        if (u.inflight >= ceiling) state[i] = KEEP;
        if (i < MAX_BITS) bits |= 1 << i;
      }
    }
    this.keepBits = bits;
    return true;
  }

  /** Bounded load's ceiling with slack `epsilon`, never below routeMinCeiling. */
  private ceiling(epsilon: number, total: number, healthy: number): number {
    return Math.max(this.opts.routeMinCeiling, Math.ceil(((1 + epsilon) * (total + 1)) / healthy));
  }

  /** vLLM says requests wait in its queue beyond the threshold (a recent reading only). */
  private queued(u: RoutedUpstream, now: number): boolean {
    return u.waitingAt !== 0 && now - u.waitingAt <= this.fresh && u.waiting > this.opts.routeMaxWaiting;
  }

  /**
   * The upstream with room for a request that one holds a prefix of, or -1: the conversation's
   * home (the key's first choice with room) when it holds any prefix of it, else the holder of
   * the longest. Home first, so that a conversation that load moved away comes back when its home
   * has room again, and replicas (which agree on home, not on what each one moved) agree again.
   */
  private holder(ups: readonly RoutedUpstream[], hint: RouteHint): number {
    const units = hint.units;
    const room = this.keepBits;
    this.series.unitsSent += units.length;
    if (room === 0) return -1;
    const home = this.keyFirst(ups, hint.key);
    const homeBit = home >= 0 && home < MAX_BITS ? 1 << home : 0;
    const last = units.length - 1;
    const stop = hint.minUnit;
    const window = Math.max(stop, last - LOOKBACK + 1);
    let want = room; // any holder until the longest is found, then home only
    let found = -1;
    let foundBits = 0;
    for (let k = last; k >= stop; k = k > window ? k - 1 : below(k, stop)) {
      const held = this.table.get(units[k]!) & want;
      if (held === 0) continue;
      if ((held & homeBit) !== 0) return this.matched(home, k);
      if (found < 0) {
        found = k;
        foundBits = held;
        if (homeBit === 0) break;
        want = homeBit;
      }
    }
    return found < 0 ? -1 : this.held(ups, hint, foundBits, found);
  }

  /** Upstream i was chosen for holding the first k + 1 units. */
  private matched(i: number, k: number): number {
    this.series.unitsMatched += k + 1;
    this.choices[i]![REASON_PREFIX]!++;
    return i;
  }

  /** The upstream with room for a held prefix (KEEP or ROOM) that `key` ranks first, or -1. */
  private keyFirst(ups: readonly RoutedUpstream[], key: number): number {
    const state = this.state;
    let best = -1;
    let bestScore = -1;
    for (let i = 0; i < ups.length; i++) {
      if (state[i]! < KEEP) continue;
      const s = score(key, ups[i]!);
      if (s > bestScore) {
        bestScore = s;
        best = i;
      }
    }
    return best;
  }

  /** Among the holders of unit k (bits), the one the conversation key ranks first. */
  private held(ups: readonly RoutedUpstream[], hint: RouteHint, bits: number, k: number): number {
    let best = -1;
    let bestScore = -1;
    for (let b = bits; b !== 0; b &= b - 1) {
      const i = 31 - Math.clz32(b & -b);
      const s = score(hint.key, ups[i]!);
      if (s > bestScore) {
        bestScore = s;
        best = i;
      }
    }
    return this.matched(best, k);
  }

  /** Rendezvous on the key among the upstreams with room ('key' when that is the key's first choice, 'load' when load moved it). */
  private byKey(ups: readonly RoutedUpstream[], key: number): number {
    const state = this.state;
    let top = -1;
    let topScore = -1;
    let best = -1;
    let bestScore = -1;
    for (let i = 0; i < ups.length; i++) {
      if (state[i] === OUT) continue;
      const s = score(key, ups[i]!);
      if (s > topScore) {
        topScore = s;
        top = i;
      }
      if (state[i] === ROOM && s > bestScore) {
        bestScore = s;
        best = i;
      }
    }
    // Every healthy one is FULL only when vLLM's queues say so: fewest in flight then.
    if (best < 0) return this.leastLoaded(ups, REASON_FALLBACK);
    this.choices[best]![best === top ? REASON_KEY : REASON_LOAD]!++;
    return best;
  }

  /** Fewest in flight among the upstreams in (with room first); for a request without any key. */
  private leastLoaded(ups: readonly RoutedUpstream[], reason: number): number {
    const state = this.state;
    const n = ups.length;
    const start = this.rotor++ % n; // ties rotate, as in 'least-loaded'
    let best = -1;
    for (let k = 0; k < n; k++) {
      const i = (start + k) % n;
      if (state[i] === OUT) continue;
      if (best < 0 || state[i]! > state[best]! || (state[i] === state[best] && ups[i]!.inflight < ups[best]!.inflight)) best = i;
    }
    this.choices[best]![reason]!++;
    return best;
  }

  private forget(i: number, ejections: number): void {
    if (i < MAX_BITS) this.table.clear(1 << i);
    this.seen[i] = ejections;
  }
}
