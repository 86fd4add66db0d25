// RESP2 commands written as bytes into one growing buffer, for the gates' Redis connection
// (resp-client.ts). The gates send two script calls per request, 14 arguments each: built as a
// string (`*14\r\n$7\r\nEVALSHA\r\n...`, one concatenation per piece, then flattened and encoded
// at the socket write, and a String() per number) they cost about 17k instructions a request
// (bench/profile, gateway-redis target). Here an ASCII string is copied a character at a time,
// an integer written a digit at a time, bytes copied in one call, and only a string with other
// characters goes through Buffer#write; the bytes are the same as the string encoding's
// (test/gateway/gates/resp-encode.test.ts). The store hands the arguments it sends on every
// request (script sha, keys, limits, model name) as bytes it made once (encodeArgs), and a call's
// numbers as one value of doubles (packedArg). Why: under callgrind V8 counts some 30
// instructions per byte a loop writes, and some 300 per TypedArray#set of a short run.

/**
 * An argument: a string (sent as UTF-8), a number (sent as its decimal string, String(n)) or
 * bytes (sent as they are), as ioredis takes them too.
 */
export type RespArg = string | number | Buffer;

/**
 * Arguments encoded once as bulk strings, copied as they are into each command that sends them
 * (RespWriter.commandOf, encodedArgs): the head of the gate store's script call (EVALSHA, the
 * sha, an account's keys, the day TTL and its limits) and a model's first values of a call, the
 * same on every call, which cost more to write a byte at a time than to copy.
 */
export interface EncodedArgs {
  readonly bytes: Buffer;
  /** How many arguments the bytes hold. */
  readonly count: number;
}

/** `args` as the bulk strings a command would carry them in. */
export function encodeArgs(args: readonly RespArg[]): EncodedArgs {
  const w = new RespWriter(64);
  w.appendArgs(args);
  return { bytes: w.take(), count: args.length };
}

const CR = 0x0d;
const LF = 0x0a;
const DOLLAR = 0x24;
const STAR = 0x2a;
const MINUS = 0x2d;
const INT32_MAX = 0x7fffffff;

/** Commands written since the last take(), as RESP2 bytes. */
export class RespWriter {
  private buf: Buffer;
  /**
   * The same bytes as a plain Uint8Array, which every single-byte store goes through: a store
   * into a Buffer (a Uint8Array subclass) costs V8 about a third more instructions (callgrind: a
   * digit 25 instructions against 40).
   */
  private bytes: Uint8Array;
  /** The same bytes again, for packedArg's doubles. */
  private data: DataView;
  private len = 0;

  constructor(initialBytes = 4096) {
    this.buf = Buffer.allocUnsafe(initialBytes);
    this.bytes = viewOf(this.buf);
    this.data = dataOf(this.buf);
  }

  /** Bytes written and not yet taken. */
  get length(): number {
    return this.len;
  }

  /** Appends one command: `*<n>` then each argument as a bulk string. */
  command(args: readonly RespArg[]): void {
    this.reserve(16);
    this.bytes[this.len++] = STAR;
    this.digits(args.length);
    this.crlf();
    this.appendArgs(args);
  }

  /** Appends arguments as bulk strings, without a command's `*<n>` line (encodeArgs). */
  appendArgs(args: readonly RespArg[]): void {
    for (let i = 0; i < args.length; i++) this.arg(args[i]!);
  }

  /**
   * Appends a command of `head`'s arguments (encoded once), then `count` more arguments that
   * `more(this, ctx)` appends: the same bytes as command() of all those arguments, without the
   * caller first gathering them into one array. The gate store writes a batch's calls straight
   * from their inputs there, each value through the method of its type (integerArg, numberArg,
   * bytesArg, encodedArgs) rather than through a test of every argument's type.
   */
  commandOf<C>(head: EncodedArgs, count: number, more: (w: RespWriter, ctx: C) => void, ctx: C): void {
    this.reserve(16);
    this.bytes[this.len++] = STAR;
    this.digits(head.count + count);
    this.crlf();
    this.copy(head.bytes);
    more(this, ctx);
  }

  /** Appends arguments encoded before (encodeArgs), as they are. */
  encodedArgs(e: EncodedArgs): void {
    this.copy(e.bytes);
  }

  private arg(a: RespArg): void {
    if (typeof a === 'number') this.numberArg(a);
    else if (typeof a === 'string') this.string(a);
    else this.bytesArg(a);
  }

  /**
   * Five numbers as one bulk string of 40 bytes, little-endian doubles (packed(): the gate
   * script reads them with struct.unpack('<ddddd')).
   */
  packedArg(a: number, b: number, c: number, d: number, e: number): void {
    this.reserve(PACKED_HEAD.length + PACKED_BYTES + 2);
    const bytes = this.bytes;
    let at = this.len;
    for (let i = 0; i < PACKED_HEAD.length; i++) bytes[at++] = PACKED_HEAD[i]!;
    const data = this.data;
    data.setFloat64(at, a, true);
    data.setFloat64(at + 8, b, true);
    data.setFloat64(at + 16, c, true);
    data.setFloat64(at + 24, d, true);
    data.setFloat64(at + 32, e, true);
    at += PACKED_BYTES;
    bytes[at++] = CR;
    bytes[at++] = LF;
    this.len = at;
  }

  /** A number as the bulk string of String(n). */
  numberArg(n: number): void {
    if (Number.isSafeInteger(n)) this.integerArg(n);
    else this.string(String(n));
  }

  /** The bytes written so far (a copy: the writer's buffer is reused), and a fresh start. */
  take(): Buffer {
    const out = Buffer.allocUnsafe(this.len);
    this.buf.copy(out, 0, 0, this.len);
    this.len = 0;
    return out;
  }

  /** Drops what was written (the connection it was for is gone). */
  clear(): void {
    this.len = 0;
  }

  /** A safe integer as a bulk string: `$<digits>\r\n<n>\r\n` (numberArg for any other number). */
  integerArg(n: number): void {
    this.reserve(48);
    if (n >= 0 && n < 10) {
      // One digit (a flag, a zero count, the number of keys: most of a call's numbers): `$1\r\n<d>\r\n`.
      const buf = this.bytes;
      const at = this.len;
      buf[at] = DOLLAR;
      buf[at + 1] = 0x31;
      buf[at + 2] = CR;
      buf[at + 3] = LF;
      buf[at + 4] = 0x30 + n;
      buf[at + 5] = CR;
      buf[at + 6] = LF;
      this.len = at + 7;
      return;
    }
    // `$<width>\r\n[-]<digits>\r\n`
    const negative = n < 0;
    const abs = negative ? -n : n;
    const count = decimalLength(abs);
    this.lengthLine(negative ? count + 1 : count);
    if (negative) this.bytes[this.len++] = MINUS;
    this.digits(abs, count);
    this.crlf();
  }

  /** Bytes as a bulk string. */
  bytesArg(b: Buffer): void {
    this.reserve(b.length + 24);
    this.lengthLine(b.length);
    this.copy(b);
    this.crlf();
  }

  /** Bytes as they are (TypedArray#set: some 300 instructions, where a loop over 20 bytes costs 800). */
  private copy(b: Buffer): void {
    this.reserve(b.length);
    this.buf.set(b, this.len);
    this.len += b.length;
  }

  /** A string as a bulk string of its UTF-8 bytes. */
  private string(s: string): void {
    const n = s.length;
    this.reserve(n + 24);
    const start = this.len;
    this.lengthLine(n);
    const buf = this.bytes;
    let at = this.len;
    for (let i = 0; i < n; i++) {
      const c = s.charCodeAt(i);
      if (c >= 0x80) {
        // Not ASCII: its byte length is not its length. Start this argument over through Buffer#write.
        this.len = start;
        this.utf8String(s);
        return;
      }
      buf[at++] = c;
    }
    this.len = at;
    this.crlf();
  }

  private utf8String(s: string): void {
    const bytes = Buffer.byteLength(s, 'utf8');
    this.reserve(bytes + 24);
    this.lengthLine(bytes);
    this.len += this.buf.write(s, this.len, 'utf8');
    this.crlf();
  }

  /** A bulk string's length line, `$<n>\r\n` (room already reserved). */
  private lengthLine(n: number): void {
    this.bytes[this.len++] = DOLLAR;
    this.digits(n);
    this.crlf();
  }

  /** A non-negative safe integer's decimal digits (`count` of them, when the caller knows it). */
  private digits(n: number, count = decimalLength(n)): void {
    const buf = this.bytes;
    let at = this.len + count;
    this.len = at;
    // Digits past 31 bits in floating point, the rest in int32 arithmetic, where a division by
    // ten compiles to a multiplication (the limits, up to 1e11 and 1e15, are the long ones).
    while (n > INT32_MAX) {
      const q = Math.floor(n / 10);
      buf[--at] = 0x30 + (n - q * 10);
      n = q;
    }
    let m = n | 0;
    do {
      const q = (m / 10) | 0;
      buf[--at] = 0x30 + (m - q * 10);
      m = q;
    } while (m > 0);
  }

  private crlf(): void {
    this.bytes[this.len++] = CR;
    this.bytes[this.len++] = LF;
  }

  /** Room for `n` more bytes. */
  private reserve(n: number): void {
    if (this.len + n <= this.buf.length) return;
    const bigger = Buffer.allocUnsafe(Math.max(this.buf.length * 2, this.len + n));
    this.buf.copy(bigger, 0, 0, this.len);
    this.buf = bigger;
    this.bytes = viewOf(bigger);
    this.data = dataOf(bigger);
  }
}

/** packedArg's value: five doubles, after their bulk string's length line. */
const PACKED_BYTES = 40;
const PACKED_HEAD = Uint8Array.from(Buffer.from(`$${PACKED_BYTES}\r\n`, 'latin1'));

/** The value packedArg writes, as bytes (for clients that take arguments as values). */
export function packed(a: number, b: number, c: number, d: number, e: number): Buffer {
  const out = Buffer.allocUnsafe(PACKED_BYTES);
  out.writeDoubleLE(a, 0);
  out.writeDoubleLE(b, 8);
  out.writeDoubleLE(c, 16);
  out.writeDoubleLE(d, 24);
  out.writeDoubleLE(e, 32);
  return out;
}

function dataOf(b: Buffer): DataView {
  return new DataView(b.buffer, b.byteOffset, b.length);
}

/** A Buffer's bytes as a plain Uint8Array. */
function viewOf(b: Buffer): Uint8Array {
  return new Uint8Array(b.buffer, b.byteOffset, b.length);
}

/** How many decimal digits a non-negative safe integer has. */
function decimalLength(n: number): number {
  if (n < 100_000) return n < 10 ? 1 : n < 100 ? 2 : n < 1000 ? 3 : n < 10_000 ? 4 : 5;
  if (n < 10_000_000_000) return n < 1_000_000 ? 6 : n < 10_000_000 ? 7 : n < 100_000_000 ? 8 : n < 1_000_000_000 ? 9 : 10;
  let count = 11;
  let m = Math.floor(n / 100_000_000_000);
  while (m >= 1) {
    m = Math.floor(m / 10);
    count++;
  }
  return count;
}
