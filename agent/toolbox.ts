// The toolbox: the platform's own commands inside every container, mounted read-only at /opt/rc
// (on PATH): `rc` and `rc-tunnel`. It is a copy of the host's node with its libraries, the
// interpreter rewritten to /opt/rc/lib/ld.so so it runs in any image (alpine, scratch, a CUDA
// image with an older glibc), plus the project's compiled code and node_modules, mounted
// read-only from the install. Nothing secret is in it: code only, no data dir, no token.
import { copyFileSync, existsSync, mkdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { basename, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { CONTAINER_TOOLBOX_DIR, type ToolboxMounts } from './docker-api.js';
import { sharedLibraries, setInterpreter } from './elf.js';

/** The project install (where dist/ and node_modules/ are), from this compiled file's place in dist/agent/. */
export const PROJECT_ROOT = fileURLToPath(new URL('../../', import.meta.url));

const LOADER = `${CONTAINER_TOOLBOX_DIR}/lib/ld.so`;

/** The commands every instance gets, and their entry points under dist/ (both runtimes write wrappers for them). */
export const TOOL_COMMANDS = [
  ['rc', 'bin/rc.js'],
  ['rc-tunnel', 'agent/tunnel/main.js'],
] as const;

function script(entry: string): string {
  return `#!/bin/sh\nLD_LIBRARY_PATH=${CONTAINER_TOOLBOX_DIR}/lib exec ${CONTAINER_TOOLBOX_DIR}/bin/node ${CONTAINER_TOOLBOX_DIR}/app/dist/${entry} "$@"\n`;
}

/**
 * Builds (or reuses) the toolbox under `dir` from the running node. Rebuilt when the node binary
 * changes (size and mtime recorded in a stamp file). Returns what the docker runtime mounts.
 */
export function prepareToolbox(dir: string, nodeBinary = process.execPath, projectRoot = PROJECT_ROOT): ToolboxMounts {
  const st = statSync(nodeBinary);
  const stamp = JSON.stringify({ node: nodeBinary, size: st.size, mtime: st.mtimeMs, v: 1 });
  const stampFile = join(dir, '.stamp');
  const mounts = { dir, dist: join(projectRoot, 'dist'), nodeModules: join(projectRoot, 'node_modules') };
  if (existsSync(stampFile) && readFileSync(stampFile, 'utf8') === stamp) return mounts;
  rmSync(dir, { recursive: true, force: true });
  for (const d of ['bin', 'lib', 'app/dist', 'app/node_modules']) mkdirSync(join(dir, d), { recursive: true, mode: 0o755 });
  const { libs, loader } = sharedLibraries(nodeBinary);
  for (const lib of libs) copyFileSync(lib, join(dir, 'lib', basename(lib)));
  copyFileSync(nodeBinary, join(dir, 'bin', 'node'));
  if (loader) {
    copyFileSync(loader, join(dir, 'lib', 'ld.so'));
    setInterpreter(join(dir, 'bin', 'node'), LOADER);
  }
  // dist/ holds ES modules: the nearest package.json must say so.
  writeFileSync(join(dir, 'app', 'package.json'), '{"type":"module"}\n');
  for (const [name, entry] of TOOL_COMMANDS) writeFileSync(join(dir, 'bin', name), script(entry), { mode: 0o755 });
  writeFileSync(stampFile, stamp);
  return mounts;
}
