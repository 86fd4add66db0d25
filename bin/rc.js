#!/usr/bin/env node
// The `rc` command. The TypeScript sources compile to dist/ (npm ci and npm start build them).
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const entry = new URL('../dist/bin/rc.js', import.meta.url);
if (!existsSync(fileURLToPath(entry))) {
  process.stderr.write('rc: not built yet; run `npm run build` (npm ci and npm start do it too)\n');
  process.exit(1);
}
await import(entry.href);
