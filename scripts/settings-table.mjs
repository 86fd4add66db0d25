// Prints the settings table of the README (markdown) from lib/config.ts, after a build:
// `node scripts/settings-table.mjs`. test/readme.test.ts checks that the README names them all.
import { describeSettings } from '../dist/lib/config.js';

console.log('| variable | default | meaning |');
console.log('|---|---|---|');
for (const r of describeSettings()) {
  const def = r.default === '' || r.default === undefined ? '(empty)' : `\`${String(r.default)}\``;
  console.log(`| \`${r.env}\` | ${def} | ${r.doc.replace(/\|/g, '\\|')} |`);
}
