#!/usr/bin/env node
// The `rc-tunnel` command (runs inside instances). The TypeScript sources compile to dist/.
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const entry = new URL('../dist/agent/tunnel/main.js', import.meta.url);
if (!existsSync(fileURLToPath(entry))) {
  process.stderr.write('rc-tunnel: not built yet; run `npm run build`\n');
  process.exit(1);
}
await import(entry.href);
