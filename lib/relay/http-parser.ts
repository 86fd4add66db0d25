// The HTTP/1.1 response parsing of the backend client (lib/relay/http-pool.ts): byte-level
// helpers, the parser states of a connection, the head and the chunk-size line. Pure functions
// over Buffers: no strings are made for the headers, and no Buffers either until a route asks
// for them (HeaderLines).
import { indexOf, subarray } from '../bytes.js';

export const CRLF2 = Buffer.from('\r\n\r\n');
export const LF = 0x0a;
export const CR = 0x0d;

/** ASCII case-insensitive equality of `buf[start, end)` with a lower-case name. */
export function asciiLowerEquals(buf: Buffer, lower: Buffer, start = 0, end = buf.length): boolean {
  const n = lower.length;
  if (end - start !== n) return false;
  // `| 0x20` lower-cases letters; the other bytes of our names ('-') are unchanged by it.
  for (let i = 0; i < n; i++) if ((buf[start + i]! | 0x20) !== lower[i]) return false;
  return true;
}

/**
 * True when the comma-separated value `buf[from, to)` lists `token` (case-insensitive). Read in
 * place: a subarray for the value would cost more than the search (some 500 instructions).
 */
export function hasToken(buf: Buffer, from: number, to: number, token: Buffer): boolean {
  let start = from;
  while (start < to) {
    // ','; a rest as long as the token is compared whole (a comma in it would make it unequal).
    let end = start + token.length === to ? to : indexOf(buf, 0x2c, start);
    if (end < 0 || end > to) end = to;
    let a = start;
    let b = end;
    while (a < b && (buf[a] === 0x20 || buf[a] === 0x09)) a++;
    while (b > a && (buf[b - 1] === 0x20 || buf[b - 1] === 0x09)) b--;
    if (asciiLowerEquals(buf, token, a, b)) return true;
    start = end + 1;
  }
  return false;
}

/** The decimal value of `buf[start, end)`, or -1 when it is not a plain non-negative integer. */
export function decimal(buf: Buffer, start: number, end: number): number {
  if (end <= start || end - start > 15) return -1;
  let n = 0;
  for (let i = start; i < end; i++) {
    const d = buf[i]! - 0x30;
    if (d < 0 || d > 9) return -1;
    n = n * 10 + d;
  }
  return n;
}

const CONTENT_LENGTH = Buffer.from('content-length');
const TRANSFER_ENCODING = Buffer.from('transfer-encoding');
const CONNECTION = Buffer.from('connection');
const CHUNKED = Buffer.from('chunked');
const CLOSE = Buffer.from('close');
const KEEP_ALIVE = Buffer.from('keep-alive');

// Parser states of a connection.
export const IDLE = 0;
export const HEAD = 1;
export const LENGTH = 2;
export const CHUNK_SIZE = 3;
export const CHUNK_DATA = 4;
export const CHUNK_END = 5;
export const TRAILERS = 6;
export const UNTIL_CLOSE = 7;

/** The hex size at the start of the line `b[start, end)` (extensions after ';' ignored), or -1. */
export function chunkSize(b: Buffer, start: number, end: number): number {
  let size = 0;
  let digits = 0;
  let k = start;
  for (; k < end; k++) {
    const c = b[k]!;
    let v: number;
    if (c >= 0x30 && c <= 0x39) v = c - 0x30;
    else if (c >= 0x61 && c <= 0x66) v = c - 0x57;
    else if (c >= 0x41 && c <= 0x46) v = c - 0x37;
    else break;
    if (++digits > 12) return -1;
    size = size * 16 + v;
  }
  if (digits === 0) return -1;
  for (; k < end; k++) {
    const c = b[k]!;
    if (c === 0x3b) break; // ';' chunk extension
    if (c !== 0x20 && c !== 0x09) return -1;
  }
  return size;
}

/** Response headers never relayed (lower case): framing, Date and uWS's mark are uWS's own. */
export const HOP_BY_HOP_RESPONSE = ['date', 'connection', 'keep-alive', 'content-length', 'transfer-encoding', 'uwebsockets', 'proxy-connection'];
export const HOP_BY_HOP_BYTES = HOP_BY_HOP_RESPONSE.map((h) => Buffer.from(h));

/** False for a name length no hop-by-hop name has (most names): the cheap test before comparing. */
export function mayBeHopByHop(n: number): boolean {
  return n === 4 || n === 10 || n === 11 || n === 14 || n === 16 || n === 17;
}

/** True when `buf[start, end)` is one of the hop-by-hop names, in any case. */
export function isHopByHopAt(buf: Buffer, start: number, end: number): boolean {
  if (!mayBeHopByHop(end - start)) return false;
  for (let i = 0; i < HOP_BY_HOP_BYTES.length; i++) if (asciiLowerEquals(buf, HOP_BY_HOP_BYTES[i]!, start, end)) return true;
  return false;
}

/** Interned header lines (interned()): slots by a hash of the line's lengths and edge bytes. */
const INTERNED_SLOTS = 64;
const internedNames: (Buffer | undefined)[] = new Array(INTERNED_SLOTS).fill(undefined);
const internedValues: (Buffer | undefined)[] = new Array(INTERNED_SLOTS).fill(undefined);

/** buf[start, end) equals `b` byte for byte. */
function sameBytes(buf: Buffer, start: number, end: number, b: Buffer): boolean {
  const n = b.length;
  if (end - start !== n) return false;
  for (let i = 0; i < n; i++) if (buf[start + i] !== b[i]) return false;
  return true;
}

/**
 * The header lines of one response head, held as offsets into the bytes they were read in. A
 * Buffer per name and per value cost more than parsing the whole head (each slice of a Buffer
 * goes through the species lookup of TypedArray#subarray), and most routes read one header or
 * none: the messages stream reads none, a chat completion writes on only its content type.
 * Whether a line is hop-by-hop is found while the head is parsed (parseHead).
 */
export class HeaderLines {
  constructor(
    private readonly buf: Buffer,
    /** nameStart, nameEnd, valueStart, valueEnd, hop-by-hop (1) or not (0) of each line, in order. */
    private readonly at: number[],
    /** The Content-Length the head declared, or -1. */
    readonly contentLength: number,
  ) {}

  /** name, value, name, value... as sent (Buffers valid to keep, not to modify: see interned()). */
  all(): Buffer[] {
    return this.slices(false);
  }

  /** The same without the hop-by-hop lines (HOP_BY_HOP_RESPONSE): what a relay writes on. */
  endToEnd(): Buffer[] {
    return this.slices(true);
  }

  /** The value of the first line named `lower` (a lower-case name), as latin1 text, or undefined. */
  get(lower: Buffer): string | undefined {
    const buf = this.buf;
    const at = this.at;
    for (let i = 0; i < at.length; i += LINE) {
      if (asciiLowerEquals(buf, lower, at[i]!, at[i + 1]!)) return buf.toString('latin1', at[i + 2]!, at[i + 3]!);
    }
    return undefined;
  }

  private slices(skipHopByHop: boolean): Buffer[] {
    const at = this.at;
    const out: Buffer[] = [];
    for (let i = 0; i < at.length; i += LINE) {
      if (skipHopByHop && at[i + 4] === 1) continue;
      interned(this.buf, at[i]!, at[i + 1]!, at[i + 2]!, at[i + 3]!, out);
    }
    return out;
  }
}

/**
 * Pushes the name and value Buffers of the line buf[ns, ne): buf[vs, ve) onto `out`: the ones
 * made for the same line before when it is in its slot (a backend sends the same content type
 * on every response: two slices of a Buffer, with their species lookups, cost some 1.6k
 * instructions, a comparison of the bytes a few hundred), else new slices, kept in the slot.
 * The Buffers are shared between responses: valid to keep, never to modify.
 */
function interned(buf: Buffer, ns: number, ne: number, vs: number, ve: number, out: Buffer[]): void {
  const slot = ((ne - ns) * 31 + (ve - vs) * 7 + buf[ns + 1]! + (ve > vs ? buf[ve - 1]! : 0)) & (INTERNED_SLOTS - 1);
  const name = internedNames[slot];
  const value = internedValues[slot];
  if (name !== undefined && value !== undefined && sameBytes(buf, ns, ne, name) && sameBytes(buf, vs, ve, value)) {
    out.push(name, value);
    return;
  }
  const n = subarray(buf, ns, ne);
  const v = subarray(buf, vs, ve);
  internedNames[slot] = n;
  internedValues[slot] = v;
  out.push(n, v);
}

/** Numbers per line in HeaderLines' offsets. */
const LINE = 5;

const NO_LINES = new HeaderLines(Buffer.alloc(0), [], -1);

/** What a response head says about its body and connection (one per connection, reused). */
export interface ParsedHead {
  status: number;
  keepAlive: boolean;
  /** The body state to parse next: IDLE (no body), LENGTH, CHUNK_SIZE or UNTIL_CLOSE. */
  state: number;
  /** Content-Length (LENGTH). */
  length: number;
  /** The header lines (a new object per head: valid to keep). */
  headers: HeaderLines;
}

/** A ParsedHead to reuse, before its first parse. */
export function emptyParsedHead(): ParsedHead {
  return { status: 0, keepAlive: true, state: IDLE, length: -1, headers: NO_LINES };
}

/** The index of the first LF in buf[from, stop), or stop. */
function nextLf(buf: Buffer, from: number, stop: number): number {
  const lf = indexOf(buf, LF, from);
  return lf < 0 || lf >= stop ? stop : lf;
}

/**
 * Parses the head in buf[start, end) (end: the index of its CRLF CRLF) into `out`. Returns an
 * error message for a malformed head, else undefined. A 1xx status sets only `out.status`.
 */
export function parseHead(buf: Buffer, start: number, end: number, out: ParsedHead): string | undefined {
  // Status line: HTTP/1.x SSS reason
  if (end - start < 12 || buf[start] !== 0x48 || buf[start + 4] !== 0x2f || buf[start + 5] !== 0x31 || buf[start + 6] !== 0x2e || buf[start + 8] !== 0x20) {
    return 'bad status line';
  }
  const status = decimal(buf, start + 9, start + 12);
  if (status < 100 || status > 999 || status === 101) return 'bad status';
  out.status = status;
  if (status < 200) return undefined;
  let keepAlive = buf[start + 7] === 0x31; // HTTP/1.1 keeps the connection by default, 1.0 does not
  let length = -1;
  let chunked = false;
  let encoded = false;
  const at: number[] = [];
  // Lines and colons are found with Buffer#indexOf of one byte (V8's fast API call, some 80
  // instructions): a JS loop costs 10 to 30 instructions a byte, over 4k for a 150-byte head.
  const stop = end + 2; // every header line ends with CRLF; the blank line is not included
  let p = nextLf(buf, start + 12, stop) + 1;
  while (p < stop) {
    const lf = nextLf(buf, p, stop);
    const colon = indexOf(buf, 0x3a, p);
    if (colon < 0 || colon >= lf || colon === p) return 'bad header line';
    const lineEnd = buf[lf - 1] === CR ? lf - 1 : lf;
    let a = colon + 1;
    let b = lineEnd;
    while (a < b && (buf[a] === 0x20 || buf[a] === 0x09)) a++;
    while (b > a && (buf[b - 1] === 0x20 || buf[b - 1] === 0x09)) b--;
    const n = colon - p;
    let hop = 1;
    if (n === 14 && asciiLowerEquals(buf, CONTENT_LENGTH, p, colon)) {
      const v = decimal(buf, a, b);
      if (v < 0 || (length >= 0 && v !== length)) return 'bad content-length';
      length = v;
    } else if (n === 17 && asciiLowerEquals(buf, TRANSFER_ENCODING, p, colon)) {
      encoded = true;
      chunked = hasToken(buf, a, b, CHUNKED);
    } else if (n === 10 && asciiLowerEquals(buf, CONNECTION, p, colon)) {
      if (hasToken(buf, a, b, CLOSE)) keepAlive = false;
      else if (hasToken(buf, a, b, KEEP_ALIVE)) keepAlive = true;
    } else if (!isHopByHopAt(buf, p, colon)) hop = 0;
    at.push(p, colon, a, b, hop);
    p = lf + 1;
  }
  let state: number;
  if (encoded) {
    // Transfer-Encoding wins over Content-Length; a coding other than chunked runs to the close.
    if (length >= 0) keepAlive = false;
    state = chunked ? CHUNK_SIZE : UNTIL_CLOSE;
    if (!chunked) keepAlive = false;
  } else if (status === 204 || status === 304 || length === 0) {
    state = IDLE;
  } else if (length > 0) {
    state = LENGTH;
  } else {
    state = UNTIL_CLOSE;
    keepAlive = false;
  }
  if (status === 204 || status === 304) state = IDLE;
  out.keepAlive = keepAlive;
  out.state = state;
  out.length = length;
  out.headers = new HeaderLines(buf, at, length);
  return undefined;
}
