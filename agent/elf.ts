// Host binaries inside containers: the shared libraries a binary needs (from ldd) and a rewrite
// of its ELF interpreter, so a copy of the host's node runs from /opt/rc in any image, whatever
// libc the image has (toolbox.ts), and test images are built from host binaries (images/).
import { execFileSync } from 'node:child_process';
import { closeSync, openSync, readSync, writeSync } from 'node:fs';

/** The absolute paths of the libraries `binary` loads, and its dynamic loader (ld.so); empty for a static binary. */
export function sharedLibraries(binary: string): { libs: string[]; loader: string | undefined } {
  let out: string;
  try {
    out = execFileSync('ldd', [binary], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] });
  } catch {
    return { libs: [], loader: undefined }; // "not a dynamic executable"
  }
  const libs: string[] = [];
  let loader: string | undefined;
  for (const line of out.split('\n')) {
    const arrow = /=>\s+(\/\S+)/.exec(line);
    if (arrow) libs.push(arrow[1]!);
    else if (/^\s*(\/\S+ld-linux\S*)\s/.test(line)) loader = /^\s*(\/\S+)/.exec(line)![1];
  }
  return { libs, loader };
}

/**
 * Rewrites the ELF interpreter (PT_INTERP) of a 64-bit little-endian binary in place. The new
 * path must not be longer than the old one (it is NUL-padded), which is all we need: a short
 * /opt/rc path instead of /lib64/ld-linux-x86-64.so.2.
 */
export function setInterpreter(file: string, interpreter: string): void {
  const fd = openSync(file, 'r+');
  try {
    const head = Buffer.alloc(64);
    readSync(fd, head, 0, 64, 0);
    if (head.readUInt32BE(0) !== 0x7f454c46 || head[4] !== 2 || head[5] !== 1) throw new Error(`${file} is not a 64-bit little-endian ELF file`);
    const phoff = Number(head.readBigUInt64LE(0x20));
    const phentsize = head.readUInt16LE(0x36);
    const phnum = head.readUInt16LE(0x38);
    const ph = Buffer.alloc(phentsize);
    for (let i = 0; i < phnum; i++) {
      readSync(fd, ph, 0, phentsize, phoff + i * phentsize);
      if (ph.readUInt32LE(0) !== 3) continue; // PT_INTERP
      const offset = Number(ph.readBigUInt64LE(8));
      const size = Number(ph.readBigUInt64LE(32));
      const bytes = Buffer.alloc(size);
      if (Buffer.byteLength(interpreter) >= size) throw new Error(`Interpreter path ${interpreter} is longer than the existing one`);
      bytes.write(interpreter);
      writeSync(fd, bytes, 0, size, offset);
      return;
    }
    throw new Error(`${file} has no ELF interpreter (a static binary?)`);
  } finally {
    closeSync(fd);
  }
}
