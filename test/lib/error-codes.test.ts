// lib/README.md's table of error codes stays in step with LIB_ERROR_CODES (lib/errors.ts), as
// test/gateway/error-codes.test.ts keeps the gateway's: every code of the table has its README
// row with its class and status, every README row names a code of the table, and no lib source
// raises an internal code outside it. Paths are relative to the repository root, where npm test runs.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { quotedCodes, sourcesOf, tableAfter, unknownCodes } from '../code-tables.js';
import { LIB_ERROR_CODES } from '../../lib/errors.js';

/** The first `code` quoted in a cell. */
const quoted = (cell: string): string | undefined => quotedCodes(cell)[0];

test('lib/README.md "Error codes" lists exactly LIB_ERROR_CODES, with their classes and statuses', () => {
  const rows = tableAfter('lib/README.md', '## Error codes');
  const documented = Object.fromEntries(rows.map((r) => [quoted(r[0]!), { class: r[1], status: Number(r[2]) }]));
  assert.deepEqual(documented, { ...LIB_ERROR_CODES });
});

test('no lib source raises an RC_ERR_ code outside LIB_ERROR_CODES, or builds one at run time', () => {
  const known = new Set<string>(Object.keys(LIB_ERROR_CODES));
  const unknown = unknownCodes(sourcesOf('lib'), (c) => known.has(c));
  assert.deepEqual(unknown, []);
});
