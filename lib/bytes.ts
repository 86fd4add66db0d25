// Buffer's methods as plain functions, for the request path.
//
// Why not `buf.indexOf(...)`: Node leaves Buffer.prototype in dictionary mode (it is built up
// property by property), so V8's optimizing compiler cannot fold `buf.indexOf` to the function it
// names. Every such call in optimized code first runs the generic LoadIC builtin with the call
// site's feedback (about 100 instructions under callgrind: 19 of them a stream in the chat relay,
// 3.8k of the stream's instructions; bench/README.md, "Buffer methods"). A method taken once
// here and called with `.call` costs the compiler a compare of the call target, and these small
// functions are inlined where they are called. Same arguments, same results as the methods.
const proto = Buffer.prototype;
const indexOfMethod = proto.indexOf;
const lastIndexOfMethod = proto.lastIndexOf;
const subarrayMethod = proto.subarray;
const copyWithinMethod = proto.copyWithin;
const setMethod = proto.set;
const toStringMethod = proto.toString;
const writeMethod = proto.write;
/** The typed-array getters every Buffer inherits (their own, not looked up through Buffer.prototype). */
const typedArrayProto = Object.getPrototypeOf(Uint8Array.prototype) as object;
const getter = (name: string): (() => unknown) => Object.getOwnPropertyDescriptor(typedArrayProto, name)!.get!;
const lengthOf = getter('length');
const bufferOf = getter('buffer');
const byteOffsetOf = getter('byteOffset');
/**
 * The class of Node's Buffer instances (Buffer itself is a function that must not be called with
 * `new`), as Node names it for typed-array methods that make new arrays. Used only when a view of
 * it is a Buffer over the memory asked for; otherwise subarray keeps to the method.
 */
const View = viewClass();
/** Whether subarray makes its views itself (Node's Buffer class found; the tests require it on the Node we run). */
export const OWN_VIEWS = View !== undefined;
function viewClass(): (new (memory: ArrayBufferLike, byteOffset: number, length: number) => Buffer) | undefined {
  const candidate = (Buffer as unknown as Record<symbol, unknown>)[Symbol.species];
  if (typeof candidate !== 'function' || candidate === Buffer) return undefined;
  const Class = candidate as new (memory: ArrayBufferLike, byteOffset: number, length: number) => Buffer;
  try {
    const memory = new ArrayBuffer(4);
    const probe = new Class(memory, 1, 2);
    return Buffer.isBuffer(probe) && probe.buffer === memory && probe.byteOffset === 1 && probe.length === 2 ? Class : undefined;
  } catch {
    return undefined;
  }
}
/** Buffer.allocUnsafe: it reads no `this`. */
const allocUnsafeFunction = Buffer.allocUnsafe;

/** `buf.indexOf(value, from)`. */
export function indexOf(buf: Buffer, value: number | Uint8Array, from?: number): number {
  return indexOfMethod.call(buf, value, from);
}

/** `buf.lastIndexOf(value, from)`. */
export function lastIndexOf(buf: Buffer, value: number | Uint8Array, from?: number): number {
  return lastIndexOfMethod.call(buf, value, from);
}

/**
 * `buf.subarray(start, end)`: a view of the same memory, no copy. Node's own subarray reads the
 * view's `buffer` and `byteOffset` through the same dictionary-mode prototype (two LoadICs a
 * call), so a view of whole-number offsets within the buffer, which is all the request path asks
 * for, is made here: the typed-array getters called directly and Buffer's own view class (what
 * `Buffer[Symbol.species]` names, checked by viewClass), about 250 of some 890 instructions a call less.
 * Anything else (negative or fractional offsets) goes to the method. The view never reaches past
 * `buf`, whatever `end` says: the memory around a pooled Buffer belongs to other Buffers.
 */
export function subarray(buf: Buffer, start: number, end?: number): Buffer {
  const n = lengthOf.call(buf) as number;
  const stop = end === undefined || end > n ? n : end;
  if (View === undefined || (start | 0) !== start || (stop | 0) !== stop || start < 0 || stop < 0) return subarrayMethod.call(buf, start, end);
  const from = start < n ? start : n;
  return new View(bufferOf.call(buf) as ArrayBufferLike, (byteOffsetOf.call(buf) as number) + from, stop > from ? stop - from : 0);
}

/** `buf.copyWithin(target, start, end)`. */
export function copyWithin(buf: Buffer, target: number, start: number, end: number): Buffer {
  return copyWithinMethod.call(buf, target, start, end);
}

/** `target.set(source, offset)`: source's bytes copied into target from `offset`. */
export function set(target: Buffer, source: Uint8Array, offset: number): void {
  setMethod.call(target, source, offset);
}

/** `buf.toString(encoding, start, end)`: the bytes decoded as text. */
export function decode(buf: Buffer, encoding: BufferEncoding, start?: number, end?: number): string {
  return toStringMethod.call(buf, encoding, start, end);
}

/** `buf.write(text, offset, length, encoding)`: the number of bytes written. */
export function write(buf: Buffer, text: string, offset: number, length: number, encoding: BufferEncoding): number {
  return writeMethod.call(buf, text, offset, length, encoding);
}

/** `Buffer.allocUnsafe(size)`: new memory, not zeroed (from Node's pool when small). */
export function allocUnsafe(size: number): Buffer {
  return allocUnsafeFunction(size);
}
