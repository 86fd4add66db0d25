// The benchmarks' outside tools (nginx, valgrind) come from Debian's packages: found on the usual
// paths, else installed with apt-get (as root) the first time a benchmark needs them.
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';

/** The first of `paths` that exists, installing Debian's `pkg` when none does; undefined when that fails. */
export function findOrInstall(paths: readonly string[], pkg: string): string | undefined {
  const found = paths.find((p) => existsSync(p));
  if (found) return found;
  try {
    process.stdout.write(`${paths[0]} not found: installing ${pkg} with apt-get\n`);
    execFileSync('apt-get', ['install', '-y', '--no-install-recommends', pkg], {
      stdio: 'inherit',
      env: { ...process.env, DEBIAN_FRONTEND: 'noninteractive' },
    });
  } catch {
    return undefined;
  }
  return paths.find((p) => existsSync(p));
}
