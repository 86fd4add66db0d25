// The gates' own Redis connection: one socket, commands pipelined in order, replies read with a
// small RESP2 parser. It does what the gates ask of Redis (EVALSHA, EVAL, SCRIPT LOAD, HGETALL)
// and nothing else. Why not ioredis: two script calls per request cost about 150k instructions
// through its command objects, argument flattening, string building and parser, more than the
// rest of the gateway's work on a request; here they cost about 55k. ioredis still serves
// the event bus and any client handed to createGate (a Cluster, tests).
//
// Behaviour the store relies on, as ioredis gives it with enableOfflineQueue off:
// - status is 'ready' only while connected; a command sent otherwise fails at once;
// - a lost connection fails every command in flight (with a plain Error: it may not have run),
//   emits 'close', and is retried with a backoff; 'ready' is emitted on each (re)connection;
// - an error reply fails its command with a ReplyError (it ran, and would fail again).
import { EventEmitter } from 'node:events';
import * as net from 'node:net';
import * as tls from 'node:tls';
import { RespWriter, type EncodedArgs, type RespArg } from './resp-encode.js';

/** An error reply from Redis (the command reached Redis and was refused). */
export class ReplyError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ReplyError';
  }
}

export type RespStatus = 'connecting' | 'ready' | 'reconnecting' | 'end';

export interface RespClientOptions {
  /** Give up a connection attempt after this long (then retry). Default 2000 ms. */
  connectTimeoutMs?: number;
  /** The wait before reconnection attempt `n` (1, 2, ...). Default min(n * 100, 1000) ms. */
  retryDelayMs?: (attempt: number) => number;
}

/** A command sent and not yet answered: its reply or error goes to resolve or reject, with `ctx`. */
interface Pending {
  resolve(value: unknown, ctx: unknown): void;
  reject(err: Error, ctx: unknown): void;
  ctx: unknown;
  /** A bulk string reply comes as its bytes (a view of the read buffer, valid during resolve()) instead of a string. */
  raw: boolean;
}

/**
 * Plain TCP connections read into this one buffer (net's `onread`), shared by all clients: reads
 * run one at a time and each is parsed before the next. Node's default read path allocates 64 KiB
 * per read, shrinks it and emits a stream event (lib/relay/http-connection.ts reads the same way).
 */
const READ_BUFFER = Buffer.allocUnsafeSlow(64 * 1024);

/** The reply is not complete in the bytes read so far. */
export const INCOMPLETE = Symbol('incomplete');
/** The bytes are not RESP: the connection is out of step. */
export const MALFORMED = Symbol('malformed');

export class RespClient extends EventEmitter {
  status: RespStatus = 'connecting';
  private socket: net.Socket | undefined;
  /** Commands sent and not yet answered, oldest first. */
  private readonly inFlight: Pending[] = [];
  /** Commands written during this event-loop turn, sent in one write by flush() (setImmediate). */
  private readonly out = new RespWriter();
  private flushQueued = false;
  /** Tasks to run just before this turn's write (beforeWrite). */
  private beforeWriteTasks: (() => void)[] = [];
  /** Bytes read that do not yet make a whole reply. */
  private rest: Buffer | undefined;
  private attempt = 0;
  private retryTimer: NodeJS.Timeout | undefined;
  private readonly url: URL;
  private readonly connectTimeoutMs: number;
  private readonly retryDelayMs: (attempt: number) => number;
  private readonly flushTask = () => this.flush();

  constructor(url: string, options: RespClientOptions = {}) {
    super();
    this.url = new URL(url);
    if (this.url.protocol !== 'redis:' && this.url.protocol !== 'rediss:') throw new Error(`Not a Redis URL: ${this.url.protocol}`);
    this.connectTimeoutMs = options.connectTimeoutMs ?? 2000;
    this.retryDelayMs = options.retryDelayMs ?? ((n) => Math.min(n * 100, 1000));
    this.connect();
  }

  evalsha(sha: string | Buffer, numkeys: number, ...args: RespArg[]): Promise<unknown> {
    return this.call('EVALSHA', sha, numkeys, ...args);
  }

  /**
   * The command made of `head` (arguments encoded once) and `count` arguments that
   * `more(writer, ctx)` appends, answered through `onReply(reply, ctx)` or `onError(err, ctx)`
   * (one is called, once): the gate store's script call of a batch (head: EVALSHA, the sha, the
   * keys, the limits), written straight from the batch, without evalsha()'s argument array and
   * promise, and with functions it made once. A bulk string reply comes as its bytes: a view of
   * the read buffer, to be read before onReply returns.
   */
  commandThen<C>(
    head: EncodedArgs,
    count: number,
    more: (w: RespWriter, ctx: C) => void,
    ctx: C,
    onReply: (reply: unknown, ctx: C) => void,
    onError: (err: Error, ctx: C) => void,
  ): void {
    if (this.status !== 'ready') {
      const err = new Error(`Redis connection is ${this.status}`);
      queueMicrotask(() => onError(err, ctx)); // later, as evalsha()'s rejection would be
      return;
    }
    this.out.commandOf(head, count, more, ctx);
    this.scheduleFlush();
    this.inFlight.push({ resolve: onReply as Pending['resolve'], reject: onError as Pending['reject'], ctx, raw: true });
  }

  eval(script: string, numkeys: number, ...args: RespArg[]): Promise<unknown> {
    return this.call('EVAL', script, numkeys, ...args);
  }

  script(subcommand: 'LOAD', source: string): Promise<unknown> {
    return this.call('SCRIPT', subcommand, source);
  }

  async hgetall(key: string): Promise<Record<string, string>> {
    const flat = (await this.call('HGETALL', key)) as string[];
    const out: Record<string, string> = {};
    for (let i = 0; i + 1 < flat.length; i += 2) out[flat[i]!] = flat[i + 1]!;
    return out;
  }

  /** One command; fails at once unless the connection is ready. */
  call(...args: RespArg[]): Promise<unknown> {
    if (this.status !== 'ready') return Promise.reject(new Error(`Redis connection is ${this.status}`));
    return this.send(args);
  }

  /** Closes the connection for good; commands in flight fail. */
  disconnect(): void {
    if (this.status === 'end') return;
    this.status = 'end';
    clearTimeout(this.retryTimer);
    this.socket?.destroy();
  }

  /**
   * Runs `task` at the end of this event-loop turn, just before the turn's commands are written:
   * what it sends goes in the same write (the gate store sends each account's calls of the turn
   * as one script call from there).
   */
  beforeWrite(task: () => void): void {
    this.beforeWriteTasks.push(task);
    this.scheduleFlush();
  }

  /** Queues a command for this turn's write; its reply settles the promise. */
  private send(args: readonly RespArg[]): Promise<unknown> {
    this.out.command(args);
    this.scheduleFlush();
    return new Promise((resolve, reject) => this.inFlight.push({ resolve, reject, ctx: undefined, raw: false }));
  }

  private scheduleFlush(): void {
    if (this.flushQueued) return;
    // After the loop's whole I/O phase, not after this callback: every request whose bytes
    // came in the same poll (each its own uWS callback) shares the one socket write.
    this.flushQueued = true;
    setImmediate(this.flushTask);
  }

  private flush(): void {
    const tasks = this.beforeWriteTasks;
    if (tasks.length > 0) {
      // Still flagged as queued while they run: what they send joins this write.
      this.beforeWriteTasks = [];
      for (let k = 0; k < tasks.length; k++) tasks[k]!();
    }
    this.flushQueued = false;
    if (this.out.length === 0 || !this.socket) return;
    this.socket.write(this.out.take());
  }

  private connect(): void {
    const { hostname, port, protocol } = this.url;
    const host = hostname.replace(/^\[|\]$/g, '') || '127.0.0.1';
    const options = { host, port: Number(port) || 6379 };
    // Plain TCP reads into the shared READ_BUFFER (net's `onread`) and parses from there; TLS keeps 'data'.
    const socket: net.Socket =
      protocol === 'rediss:'
        ? tls.connect({ ...options, servername: net.isIP(host) ? undefined : host })
        : net.connect({ ...options, onread: { buffer: READ_BUFFER, callback: (n: number): true => this.onRead(socket, n) } });
    this.socket = socket;
    socket.setNoDelay(true);
    socket.setTimeout(this.connectTimeoutMs, () => socket.destroy(new Error(`Redis did not accept a connection within ${this.connectTimeoutMs} ms`)));
    socket.once(protocol === 'rediss:' ? 'secureConnect' : 'connect', () => this.onConnect(socket));
    if (protocol === 'rediss:') socket.on('data', (chunk: Buffer) => this.onData(chunk, chunk.length, false));
    // Like ioredis, errors are events; without a listener they are dropped, not thrown.
    socket.on('error', (err) => {
      if (this.listenerCount('error') > 0) this.emit('error', err);
    });
    socket.on('close', () => this.onClose(socket));
  }

  private onConnect(socket: net.Socket): void {
    socket.setTimeout(0);
    // AUTH and SELECT from the URL go first; the connection is ready once they have answered.
    const setup: Promise<unknown>[] = [];
    const user = decodeURIComponent(this.url.username);
    const password = decodeURIComponent(this.url.password);
    const db = this.url.pathname.slice(1);
    if (password !== '') setup.push(this.send(user === '' ? ['AUTH', password] : ['AUTH', user, password]));
    if (db !== '' && db !== '0') setup.push(this.send(['SELECT', db]));
    Promise.all(setup).then(
      () => {
        if (this.socket !== socket || this.status === 'end') return;
        this.attempt = 0;
        this.status = 'ready';
        this.emit('ready');
      },
      (err: Error) => socket.destroy(err),
    );
  }

  private onClose(socket: net.Socket): void {
    if (this.socket !== socket) return;
    this.socket = undefined;
    this.rest = undefined;
    this.out.clear();
    const lost = this.inFlight.splice(0);
    const wasEnded = this.status === 'end';
    if (!wasEnded) this.status = 'reconnecting';
    for (const p of lost) p.reject(new Error('Redis connection closed'), p.ctx);
    this.emit('close');
    if (wasEnded) return;
    this.retryTimer = setTimeout(
      () => {
        if (this.status === 'end') return;
        this.status = 'connecting';
        this.connect();
      },
      this.retryDelayMs(++this.attempt),
    );
    this.retryTimer.unref(); // a client waiting to reconnect does not keep the process alive
  }

  /**
   * `n` bytes were read into READ_BUFFER. Replies are parsed from it in place (what they hold is
   * copied out as numbers and strings); only an unfinished reply is copied, to wait for the rest.
   */
  private onRead(socket: net.Socket, n: number): true {
    if (this.socket === socket) this.onData(READ_BUFFER, n, true);
    return true;
  }

  /**
   * Answers the commands whose replies are in chunk[0, length) (no subarray per read: a Buffer
   * made is some 500 instructions); `shared`: the chunk is READ_BUFFER, which the next read reuses.
   */
  private onData(chunk: Buffer, length: number, shared: boolean): void {
    let buf = chunk;
    let end = length;
    if (this.rest) {
      buf = Buffer.concat([this.rest, chunk.subarray(0, length)]);
      end = buf.length;
      this.rest = undefined;
    }
    let pos = 0;
    while (pos < end) {
      const next = this.inFlight[0];
      const reply = next?.raw === true ? parseRawReply(buf, pos, end) : parseReply(buf, pos, end);
      if (reply === INCOMPLETE) break;
      pos = parsedTo;
      const pending = reply === MALFORMED ? undefined : this.inFlight.shift();
      if (!pending) {
        // Not RESP, or a reply to nothing: the stream is out of step; start over on a new connection.
        this.socket?.destroy(new Error('Unexpected bytes from Redis'));
        return;
      }
      if (reply instanceof ReplyError) pending.reject(reply, pending.ctx);
      else pending.resolve(reply, pending.ctx);
    }
    if (pos < end) this.rest = shared && buf === chunk ? Buffer.from(buf.subarray(pos, end)) : buf.subarray(pos, end);
  }
}

/** Where the last complete parseReply ended (a module variable: no tuple per reply). */
let parsedTo = 0;

/**
 * One RESP2 reply starting at `pos` in the bytes before `end`: a number, a string, null, an
 * array of replies, or a ReplyError; INCOMPLETE when its bytes have not all arrived, MALFORMED
 * when they are not RESP. Sets parsedTo past it.
 */
export function parseReply(buf: Buffer, pos: number, end = buf.length): unknown {
  return replyAt(buf, bytesOf(buf), pos, end);
}

/**
 * parseReply, reading single bytes through `bytes`, a plain Uint8Array over `buf`: under
 * callgrind V8 counts a byte read from a Buffer (a Uint8Array subclass) about a third dearer,
 * and a reply is read a byte at a time (a script reply is 8 integers per admission).
 */
function replyAt(buf: Buffer, bytes: Uint8Array, pos: number, end: number): unknown {
  if (pos >= end) return INCOMPLETE;
  switch (bytes[pos]) {
    case 0x3a: // ':' integer
      return integerLine(bytes, pos + 1, end);
    case 0x2b: // '+' simple string
    case 0x2d: {
      // '-' error
      const cr = lineEnd(bytes, pos + 1, end);
      if (cr < 0) return cr === LINE_INCOMPLETE ? INCOMPLETE : MALFORMED;
      parsedTo = cr + 2;
      const text = buf.toString('utf8', pos + 1, cr);
      return bytes[pos] === 0x2b ? text : new ReplyError(text);
    }
    case 0x24: {
      const start = bulkAt(bytes, pos, end);
      return typeof start === 'number' ? buf.toString('utf8', start, bulkEnd) : start;
    }
    case 0x2a: {
      // '*' array: *<count>\r\n then each element; nil with a count of -1
      const n = integerLine(bytes, pos + 1, end);
      if (typeof n !== 'number') return n;
      if (n < 0) return null;
      const items: unknown[] = new Array(n);
      let at = parsedTo;
      for (let i = 0; i < n; i++) {
        // Integers (all of a script reply's elements) without the call through replyAt.
        const item = at < end && bytes[at] === 0x3a ? integerLine(bytes, at + 1, end) : replyAt(buf, bytes, at, end);
        if (item === INCOMPLETE || item === MALFORMED) return item;
        items[i] = item;
        at = parsedTo;
      }
      parsedTo = at;
      return items;
    }
    default:
      return MALFORMED;
  }
}

/**
 * The (possibly negative) decimal integer from `from` to the line's CRLF, in one pass over its
 * bytes; sets parsedTo past the CRLF. INCOMPLETE when the line has not all arrived, MALFORMED
 * when it is not an integer and its CRLF.
 */
function integerLine(bytes: Uint8Array, from: number, end: number): number | symbol {
  let i = from;
  let sign = 1;
  if (i < end && bytes[i] === 0x2d) {
    sign = -1;
    i++;
  }
  const first = i;
  let n = 0;
  for (; i < end; i++) {
    const c = bytes[i]!;
    if (c === 0x0d) {
      if (i === first) return MALFORMED;
      if (i + 1 === end) return INCOMPLETE;
      if (bytes[i + 1] !== 0x0a) return MALFORMED;
      parsedTo = i + 2;
      return sign * n;
    }
    const d = c - 0x30;
    if (d < 0 || d > 9) return MALFORMED; // a LF without its CR too
    n = n * 10 + d;
  }
  return INCOMPLETE;
}

/** parseReply, but a bulk string comes as its bytes (a view of `buf`), not as a string. */
export function parseRawReply(buf: Buffer, pos: number, end = buf.length): unknown {
  if (pos >= end || buf[pos] !== 0x24) return parseReply(buf, pos, end);
  const start = bulkAt(bytesOf(buf), pos, end);
  return typeof start === 'number' ? buf.subarray(start, bulkEnd) : start;
}

/** Where the bulk string bulkAt read last ends (its CRLF). */
let bulkEnd = 0;

/**
 * The bulk string whose `$` is at `pos` (`$<length>\r\n<bytes>\r\n`): the index of its first
 * byte (its end in bulkEnd, parsedTo past its CRLF); null for nil (a length of -1); INCOMPLETE or
 * MALFORMED as integerLine gives them.
 */
function bulkAt(bytes: Uint8Array, pos: number, end: number): number | null | symbol {
  const n = integerLine(bytes, pos + 1, end);
  if (typeof n !== 'number') return n;
  if (n < 0) return null;
  const start = parsedTo;
  const last = start + n;
  if (last + 2 > end) return INCOMPLETE;
  parsedTo = last + 2;
  bulkEnd = last;
  return start;
}

/** lineEnd(): the line's CRLF has not all arrived. */
const LINE_INCOMPLETE = -1;
/** lineEnd(): a LF without its CR, or a CR not followed by LF (neither is in a RESP line). */
const LINE_MALFORMED = -2;

/** The index of the CR that ends the line going on at `from`, or LINE_INCOMPLETE or LINE_MALFORMED. */
function lineEnd(bytes: Uint8Array, from: number, end: number): number {
  for (let i = from; i < end; i++) {
    const c = bytes[i];
    if (c === 0x0d) {
      if (i + 1 === end) return LINE_INCOMPLETE;
      return bytes[i + 1] === 0x0a ? i : LINE_MALFORMED;
    }
    if (c === 0x0a) return LINE_MALFORMED;
  }
  return LINE_INCOMPLETE;
}

/** The last Buffer parsed and its bytes as a plain Uint8Array (READ_BUFFER's, read after read). */
let viewed: Buffer | undefined;
let viewedBytes: Uint8Array = new Uint8Array(0);

function bytesOf(buf: Buffer): Uint8Array {
  if (buf !== viewed) {
    viewed = buf;
    viewedBytes = new Uint8Array(buf.buffer, buf.byteOffset, buf.length);
  }
  return viewedBytes;
}
