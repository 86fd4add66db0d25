// Runs the node:test suite from the compiled tree. Extra arguments are passed on
// (for example a single file: `npm test -- dist/test/sim/sim.test.js`).
import { spawnSync } from 'node:child_process';

const files = process.argv.slice(2);
const args = ['--test', '--test-concurrency=2', '--test-timeout=300000', ...(files.length ? files : ['dist/test/'])];
const env = { ...process.env, RC_LOG_LEVEL: process.env.RC_LOG_LEVEL ?? 'silent' };
const r = spawnSync(process.execPath, args, { stdio: 'inherit', env });
process.exit(r.status ?? 1);
