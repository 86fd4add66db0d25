// Root filesystems for the images the project builds itself (no registry is needed or used):
// static busybox as the base, plus host binaries copied with the libraries they load, at the
// same paths as on the host.
import { execFileSync } from 'node:child_process';
import { copyFileSync, cpSync, existsSync, mkdirSync, realpathSync, symlinkSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { sharedLibraries } from '../elf.js';

/** The static busybox of Debian's busybox-static. */
export const BUSYBOX = '/bin/busybox';

/** Copies `file` (following symlinks) to the same path under `root`. */
function copyToRoot(root: string, file: string, target = file): void {
  const dest = join(root, target);
  mkdirSync(dirname(dest), { recursive: true });
  copyFileSync(realpathSync(file), dest);
}

/** A minimal root: busybox and a link per applet in /bin, root and nobody in /etc/passwd, /tmp. */
export function busyboxRoot(root: string): void {
  if (!existsSync(BUSYBOX)) throw new Error(`${BUSYBOX} is missing: install Debian's busybox-static`);
  copyToRoot(root, BUSYBOX);
  const applets = execFileSync(BUSYBOX, ['--list'], { encoding: 'utf8' }).split('\n').filter(Boolean);
  for (const a of applets) if (a !== 'busybox' && !existsSync(join(root, 'bin', a))) symlinkSync('busybox', join(root, 'bin', a));
  mkdirSync(join(root, 'etc'), { recursive: true });
  writeFileSync(
    join(root, 'etc', 'passwd'),
    'root:x:0:0:root:/root:/bin/sh\nsshd:x:100:65534::/run/sshd:/bin/false\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n',
  );
  writeFileSync(join(root, 'etc', 'group'), 'root:x:0:\nnogroup:x:65534:\n');
  for (const d of ['tmp', 'root', 'run', 'var/tmp']) mkdirSync(join(root, d), { recursive: true, mode: d.endsWith('tmp') ? 0o1777 : 0o755 });
}

/** Copies a host binary and every library it loads (the loader included) to the same paths. */
export function addBinary(root: string, binary: string): void {
  copyToRoot(root, binary);
  const { libs, loader } = sharedLibraries(binary);
  for (const lib of libs) copyToRoot(root, lib);
  if (loader) copyToRoot(root, loader);
}

/** Copies a host directory tree to the same path, skipping names in `skip`. */
export function addTree(root: string, dir: string, skip: string[] = []): void {
  cpSync(dir, join(root, dir), { recursive: true, filter: (src) => !skip.some((s) => src === join(dir, s)) });
}
