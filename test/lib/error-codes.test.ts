// lib/README.md's table of error codes stays in step with LIB_ERROR_CODES (lib/errors.ts), as
// test/gateway/error-codes.test.ts keeps the gateway's: every code of the table has its README
// row with its class and status, every README row names a code of the table, and no lib source
// raises an internal code outside it. Paths are relative to the repository root, where npm test runs.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { LIB_ERROR_CODES } from '../../lib/errors.js';

/** The rows of the first markdown table after `heading`, as cells. */
function tableAfter(file: string, heading: string): string[][] {
  const text = readFileSync(file, 'utf8');
  const at = text.indexOf(heading);
  assert.ok(at >= 0, `${file} has no "${heading}"`);
  const lines = text.slice(at).split('\n');
  const start = lines.findIndex((l) => l.startsWith('|'));
  const rows: string[][] = [];
  for (let i = start + 2; i < lines.length && lines[i]!.startsWith('|'); i++)
    rows.push(
      lines[i]!.split('|')
        .slice(1, -1)
        .map((c) => c.trim()),
    );
  return rows;
}

/** The first `code` quoted in a cell. */
const quoted = (cell: string): string | undefined => /`([A-Za-z_]+)`/.exec(cell)?.[1];

test('lib/README.md "Error codes" lists exactly LIB_ERROR_CODES, with their classes and statuses', () => {
  const rows = tableAfter('lib/README.md', '## Error codes');
  const documented = Object.fromEntries(rows.map((r) => [quoted(r[0]!), { class: r[1], status: Number(r[2]) }]));
  assert.deepEqual(documented, { ...LIB_ERROR_CODES });
});

test('no lib source raises an RC_ERR_ code outside LIB_ERROR_CODES, or builds one at run time', () => {
  const known = new Set<string>(Object.keys(LIB_ERROR_CODES));
  const files: string[] = [];
  const walk = (dir: string): void => {
    for (const name of readdirSync(dir)) {
      const p = join(dir, name);
      if (statSync(p).isDirectory()) walk(p);
      else if (p.endsWith('.ts')) files.push(p);
    }
  };
  walk('lib');
  const unknown: string[] = [];
  for (const f of files) {
    const src = readFileSync(f, 'utf8');
    for (const m of src.matchAll(/RC_ERR_[A-Z_]*/g)) if (!known.has(m[0])) unknown.push(`${f}: ${m[0]}`);
    if (/`RC_ERR_[A-Z_]*\$\{/.test(src)) unknown.push(`${f}: a code built at run time`);
  }
  assert.deepEqual(unknown, []);
});
