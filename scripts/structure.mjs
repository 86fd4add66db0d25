// The structure of the source tree, read from the code itself with the TypeScript parser: import
// arrows between the parts, import cycles (run-time and type-only), the largest files and the
// longest functions. `node scripts/structure.mjs [--json]` prints it; test/structure.test.ts holds
// the tree to the rules in README.md "Layout" (no cycles, lib/ imports no part, no long function).
// Tests (test/) and generated code (proto/gen/) are not part of the structure.
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import ts from 'typescript';

/** Top folders that are parts of the platform (or its tools); each source file belongs to one. */
export const PARTS = ['lib', 'gateway', 'control-plane', 'agent', 'sim', 'bin', 'bench', 'proto', 'scripts'];

/** The source files git knows (tracked, or new and not ignored), minus tests and generated code. */
export function sourceFiles(root = '.') {
  const out = execFileSync('git', ['ls-files', '-co', '--exclude-standard', '*.ts'], { cwd: root, encoding: 'utf8' });
  return out
    .split('\n')
    .filter((f) => f && !f.startsWith('test/') && !f.startsWith('proto/gen/') && !f.startsWith('node_modules/') && !f.startsWith('dist/'))
    .filter((f) => {
      try {
        readFileSync(join(root, f));
        return true;
      } catch {
        return false; // deleted in the work tree
      }
    });
}

/** The part a file belongs to: its top folder. */
export const partOf = (file) => file.split('/')[0];

/**
 * Every relative import of every file: `{ from, to, typeOnly }`, `to` resolved to a source path.
 * An import is type-only when the whole declaration is `import type`/`export type`, or every
 * named binding is `type` (TypeScript erases those, so they make no run-time edge).
 */
export function importsOf(root, files) {
  const known = new Set(files);
  const edges = [];
  for (const from of files) {
    const sf = ts.createSourceFile(from, readFileSync(join(root, from), 'utf8'), ts.ScriptTarget.Latest, true);
    for (const st of sf.statements) {
      if (!(ts.isImportDeclaration(st) || ts.isExportDeclaration(st)) || !st.moduleSpecifier) continue;
      const spec = st.moduleSpecifier.text;
      if (!spec.startsWith('.')) continue;
      const to = relative(resolve(root), resolve(root, dirname(from), spec)).replace(/\.js$/, '.ts');
      if (!known.has(to)) continue;
      edges.push({ from, to, typeOnly: isTypeOnly(st) });
    }
  }
  return edges;
}

function isTypeOnly(st) {
  if (ts.isExportDeclaration(st))
    return st.isTypeOnly || (!!st.exportClause && ts.isNamedExports(st.exportClause) && st.exportClause.elements.every((e) => e.isTypeOnly));
  const c = st.importClause;
  if (!c) return false; // a side-effect import runs the module
  if (c.isTypeOnly) return true;
  if (c.name) return false;
  const b = c.namedBindings;
  return !!b && ts.isNamedImports(b) && b.elements.length > 0 && b.elements.every((e) => e.isTypeOnly);
}

/** Strongly connected components of more than one file (Tarjan), each sorted, largest first. */
export function cycles(files, edges) {
  const next = new Map(files.map((f) => [f, []]));
  for (const e of edges) next.get(e.from).push(e.to);
  let index = 0;
  const idx = new Map();
  const low = new Map();
  const stack = [];
  const on = new Set();
  const out = [];
  const visit = (v) => {
    idx.set(v, index);
    low.set(v, index++);
    stack.push(v);
    on.add(v);
    for (const w of next.get(v)) {
      if (!idx.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v), low.get(w)));
      } else if (on.has(w)) low.set(v, Math.min(low.get(v), idx.get(w)));
    }
    if (low.get(v) === idx.get(v)) {
      const scc = [];
      let w;
      do {
        w = stack.pop();
        on.delete(w);
        scc.push(w);
      } while (w !== v);
      if (scc.length > 1) out.push(scc.sort());
    }
  };
  for (const f of files) if (!idx.has(f)) visit(f);
  return out.sort((a, b) => b.length - a.length);
}

/** Every function-like node with a body and its length in lines (first to last, nested ones included). */
export function functionsOf(root, files) {
  const out = [];
  for (const file of files) {
    const sf = ts.createSourceFile(file, readFileSync(join(root, file), 'utf8'), ts.ScriptTarget.Latest, true);
    const visit = (n) => {
      if (ts.isFunctionLike(n) && n.body) {
        const first = sf.getLineAndCharacterOfPosition(n.getStart(sf)).line;
        const last = sf.getLineAndCharacterOfPosition(n.end).line;
        out.push({ file, line: first + 1, name: nameOf(n), lines: last - first + 1 });
      }
      ts.forEachChild(n, visit);
    };
    visit(sf);
  }
  return out.sort((a, b) => b.lines - a.lines);
}

function nameOf(n) {
  if (n.name) return n.name.getText();
  const p = n.parent;
  if (p && (ts.isVariableDeclaration(p) || ts.isPropertyAssignment(p) || ts.isPropertyDeclaration(p))) return p.name.getText();
  return '<anonymous>';
}

/** The whole picture, as data. */
export function structure(root = '.') {
  const files = sourceFiles(root);
  const edges = importsOf(root, files);
  const arrows = {};
  for (const e of edges) {
    const a = partOf(e.from);
    const b = partOf(e.to);
    if (a !== b) arrows[`${a} -> ${b}`] = (arrows[`${a} -> ${b}`] ?? 0) + 1;
  }
  const lines = (f) => readFileSync(join(root, f), 'utf8').split('\n').length;
  return {
    files: files.length,
    arrows: Object.fromEntries(Object.entries(arrows).sort()),
    runtimeCycles: cycles(
      files,
      edges.filter((e) => !e.typeOnly),
    ),
    allCycles: cycles(files, edges),
    largestFiles: files
      .map((f) => ({ file: f, lines: lines(f) }))
      .sort((a, b) => b.lines - a.lines)
      .slice(0, 10),
    longFunctions: functionsOf(root, files).filter((f) => f.lines > 60),
  };
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const s = structure(process.argv.find((a, i) => i > 1 && !a.startsWith('--')) ?? '.');
  if (process.argv.includes('--json')) console.log(JSON.stringify(s, null, 2));
  else {
    console.log(`${s.files} source files (tests and generated code left out)\n\nimport arrows between folders:`);
    for (const [k, v] of Object.entries(s.arrows)) console.log(`  ${k}: ${v}`);
    console.log(`\nrun-time import cycles: ${s.runtimeCycles.length}`);
    for (const c of s.runtimeCycles) console.log(`  ${c.join(' <-> ')}`);
    console.log(`cycles counting type-only imports: ${s.allCycles.length}`);
    for (const c of s.allCycles) console.log(`  ${c.length} files: ${c.join(', ')}`);
    console.log('\nlargest files:');
    for (const f of s.largestFiles) console.log(`  ${f.lines} ${f.file}`);
    console.log('\nfunctions over 60 lines:');
    for (const f of s.longFunctions) console.log(`  ${f.lines} ${f.file}:${f.line} ${f.name}`);
  }
}
