// Build: generate TypeScript from proto/ (buf + protoc-gen-es, local plugin, no network), then tsc.
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync } from 'node:fs';

const run = (cmd, args) => {
  try {
    execFileSync(cmd, args, { stdio: 'inherit' });
  } catch {
    process.exit(1);
  }
};
const bin = (name) => `node_modules/.bin/${name}`;

if (existsSync('proto') && readdirSync('proto', { recursive: true }).some((f) => String(f).endsWith('.proto'))) {
  run(bin('buf'), ['generate']);
}
run(bin('tsc'), ['-p', 'tsconfig.json']);
