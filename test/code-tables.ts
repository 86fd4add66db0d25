// What the error-code tests of every part share (test/{lib,gateway,control-plane}/error-codes.test.ts):
// a README's markdown table read as cells, the codes quoted in a cell, and a part's sources.
// Paths are relative to the repository root, where npm test runs.
import assert from 'node:assert/strict';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';

/** The rows of the first markdown table after `heading` in `file`, as trimmed cells. */
export function tableAfter(file: string, heading: string): string[][] {
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

/** Every `code` quoted in a cell, in order. */
export const quotedCodes = (cell: string): string[] => [...cell.matchAll(/`([A-Za-z_]+)`/g)].map((m) => m[1]!);

/** Every .ts file below `dir`, with its text. */
export function sourcesOf(dir: string): { path: string; text: string }[] {
  const files: string[] = [];
  const walk = (d: string): void => {
    for (const name of readdirSync(d)) {
      const p = join(d, name);
      if (statSync(p).isDirectory()) walk(p);
      else if (p.endsWith('.ts')) files.push(p);
    }
  };
  walk(dir);
  return files.map((path) => ({ path, text: readFileSync(path, 'utf8') }));
}

/** `file: code` for each RC_ERR_ code a source names outside `known`, and for each code built at run time. */
export function unknownCodes(sources: { path: string; text: string }[], known: (code: string) => boolean): string[] {
  const unknown: string[] = [];
  for (const { path, text } of sources) {
    for (const m of text.matchAll(/RC_ERR_[A-Z_]*/g)) if (!known(m[0])) unknown.push(`${path}: ${m[0]}`);
    if (/`RC_ERR_[A-Z_]*\$\{/.test(text)) unknown.push(`${path}: a code built at run time`);
  }
  return unknown;
}
