// The rooms hold (README.md "Layout", issue 29): read from the code with scripts/structure.mjs
// (the TypeScript parser over the files git knows; tests and generated code left out). Each rule
// names what breaks it, so a failure says which import or function to change.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { pathToFileURL } from 'node:url';
import { resolve } from 'node:path';

interface Edge {
  from: string;
  to: string;
  typeOnly: boolean;
}
interface Fn {
  file: string;
  line: number;
  name: string;
  lines: number;
}
interface StructureModule {
  sourceFiles(root?: string): string[];
  importsOf(root: string, files: string[]): Edge[];
  cycles(files: string[], edges: Edge[]): string[][];
  functionsOf(root: string, files: string[]): Fn[];
  partOf(file: string): string;
}

// npm test runs from the repository root.
const root = resolve('.');
const s = (await import(pathToFileURL(resolve(root, 'scripts/structure.mjs')).href)) as StructureModule;
const files = s.sourceFiles(root);
const edges = s.importsOf(root, files);

/** The longest a function may be, nested functions counted in their parent (issue 29). */
const MAX_FUNCTION_LINES = 80;

/**
 * Which part may import which. lib/ is below every part and imports none; the parts are apart,
 * except that the control plane uses the agent's published gRPC client and its types; bin/
 * assembles everything, bench/ and scripts/ measure it.
 */
function allowed(from: string, to: string): boolean {
  const a = s.partOf(from);
  const b = s.partOf(to);
  if (a === b || b === 'lib' || b === 'proto') return true;
  if (a === 'bin' || a === 'bench' || a === 'scripts') return true;
  if (a === 'control-plane' && (to === 'agent/client.ts' || to === 'agent/types.ts')) return true;
  return false;
}

test('the structure reader sees the tree (a rule over nothing would pass by itself)', () => {
  assert.ok(files.length > 100, `only ${files.length} source files found`);
  assert.ok(edges.length > 300, `only ${edges.length} imports found`);
  assert.ok(edges.some((e) => e.typeOnly) && edges.some((e) => !e.typeOnly), 'both kinds of import are told apart');
  // The reader finds a cycle where there is one, and measures functions.
  assert.deepEqual(
    s.cycles(
      ['a', 'b', 'c'],
      [
        { from: 'a', to: 'b', typeOnly: false },
        { from: 'b', to: 'c', typeOnly: false },
        { from: 'c', to: 'a', typeOnly: true },
      ],
    ),
    [['a', 'b', 'c']],
  );
  assert.ok(s.functionsOf(root, files).some((f) => f.lines > 20));
});

test('no import cycle at run time', () => {
  assert.deepEqual(
    s.cycles(
      files,
      edges.filter((e) => !e.typeOnly),
    ),
    [],
  );
});

test('no cycle across more than two files, type-only imports counted', () => {
  assert.deepEqual(
    s.cycles(files, edges).filter((c) => c.length > 2),
    [],
  );
});

test('lib/ imports no part, and no part imports another part', () => {
  const crossing = edges.filter((e) => !allowed(e.from, e.to)).map((e) => `${e.from} -> ${e.to}`);
  assert.deepEqual(crossing, []);
});

test(`no function over ${MAX_FUNCTION_LINES} lines outside the tests`, () => {
  const long = s
    .functionsOf(root, files)
    .filter((f) => f.lines > MAX_FUNCTION_LINES)
    .map((f) => `${f.file}:${f.line} ${f.name} (${f.lines} lines)`);
  assert.deepEqual(long, []);
});
