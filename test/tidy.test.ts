/**
 * The architecture's boundaries, enforced by reading every import in src/ (static, `export ... from`
 * and dynamic `import()`, parsed with the TypeScript compiler):
 *
 *   - Layers: every part of src/ sits in one layer of LAYERS and imports only parts in lower layers
 *     (or itself). Type-only imports count: a type is a dependency too. No upward or sideways arrows.
 *   - Purity: the modules in PURE do no I/O, read no clock and draw no unseeded random numbers. At
 *     run time they import no I/O module and only other pure modules, so nothing they load can do
 *     I/O either; their own lines call no clock, timer or random source.
 *
 * A failure prints each offending import or line.
 */

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, readdirSync, statSync } from 'node:fs';
import { dirname, join, normalize, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';

const SRC = fileURLToPath(new URL('../../src/', import.meta.url));

/**
 * Lowest first. A part is a folder of src/ (in swarm/, seed/ and loader/ a folder one down) or a
 * file named here. `format` sits right above `util`, so it imports nothing else of ours; the seed
 * tier sits above the swarm (the scheduler mounts the catalog's routes without knowing them).
 */
const LAYERS: ReadonlyArray<readonly string[]> = [
  ['errors.ts'],
  ['util', 'auth'],
  ['format'],
  ['origin', 'synth', 'swarm/core', 'swarm/wire', 'loader/plan', 'loader/sharded-state'],
  ['manifest', 'sim'],
  ['piece', 'loader/stream'],
  ['pull', 'swarm/scheduler', 'swarm/agent', 'loader/slice', 'loader/preshard'],
  ['swarm/agent-pull.ts', 'swarm/local-agent.ts', 'swarm/swarm-pull.ts', 'loader/index.ts'],
  ['seed/plan', 'seed/wire.ts', 'seed/limits.ts'],
  ['seed/catalog'],
  ['seed/node', 'seed/read'],
  ['seed/put', 'seed/apply'],
  // The package's entries (package.json `exports`) other than those inside a part.
  ['index.ts', 'swarm/index.ts', 'seed/index.ts'],
  ['cli'],
];

/** Folders and files (relative to src/) that must stay pure; a folder's exceptions follow a `!`. */
const PURE = [
  'swarm/core',
  'sim',
  'seed/plan',
  'loader/plan',
  '!loader/plan/files.ts',
  'loader/preshard',
  '!loader/preshard/preshard.ts',
  'errors.ts',
  'format/dtype.ts',
  'format/float-bits.ts',
  'format/index-json.ts',
  'format/inspect.ts',
  'format/json-keys.ts',
  'format/model-directory.ts',
  'manifest/merkle.ts',
  'origin/retry.ts',
  'origin/response-reader.ts',
  'piece/write-policy.ts',
  'swarm/wire/peer-frames.ts',
  'synth/architectures.ts',
  'synth/plan.ts',
  'synth/sharding.ts',
  'synth/sizing.ts',
  'synth/space.ts',
  'synth/tokenizer.ts',
  'util/json-document.ts',
  'util/safe-path.ts',
  'util/schema.ts',
  'util/text-table.ts',
  'util/units.ts',
];

/** Modules that reach the outside world: files, sockets, processes, threads, timers, the clock. */
const IO_MODULES = new Set([
  'child_process',
  'cluster',
  'dgram',
  'dns',
  'dns/promises',
  'fs',
  'fs/promises',
  'http',
  'http2',
  'https',
  'inspector',
  'net',
  'os',
  'perf_hooks',
  'process',
  'readline',
  'tls',
  'timers',
  'timers/promises',
  'worker_threads',
  'undici',
  'pino',
]);

/** node:crypto hashes purely; these of its exports are randomness. */
const CRYPTO_RANDOM = /^(random|getRandomValues$|webcrypto$|generateKey|generatePrime)/;

const BANNED_CALLS: Array<[RegExp, string]> = [
  [/\bDate\.now\s*\(/, 'reads the clock'],
  [/\bnew Date\s*\(\s*\)/, 'reads the clock'],
  [/\bperformance\.now\s*\(/, 'reads the clock'],
  [/\bprocess\.hrtime\b/, 'reads the clock'],
  [/\bMath\.random\s*\(/, 'uses unseeded randomness'],
  [/\bcrypto\.(getRandomValues|randomUUID)\s*\(/, 'uses unseeded randomness'],
  [/\bsetTimeout\s*\(|\bsetInterval\s*\(|\bsetImmediate\s*\(/, 'uses timers'],
];

interface Import {
  file: string;
  line: number;
  specifier: string;
  typeOnly: boolean;
  /** Named bindings, when the import names them (for node:crypto). */
  names: string[] | undefined;
}

function sourceFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) return sourceFiles(path);
    return name.endsWith('.ts') && !name.endsWith('.d.ts') ? [relative(SRC, path)] : [];
  });
}

function importsOf(file: string): Import[] {
  const text = readFileSync(join(SRC, file), 'utf8');
  const source = ts.createSourceFile(file, text, ts.ScriptTarget.ES2022, true);
  const found: Import[] = [];
  const add = (node: ts.Node, specifier: string, typeOnly: boolean, names?: string[]): void => {
    const line = source.getLineAndCharacterOfPosition(node.getStart()).line + 1;
    found.push({ file, line, specifier, typeOnly, names });
  };
  const visit = (node: ts.Node): void => {
    if (ts.isImportDeclaration(node) && ts.isStringLiteral(node.moduleSpecifier)) {
      const clause = node.importClause;
      const named = clause?.namedBindings;
      const elements = named !== undefined && ts.isNamedImports(named) ? named.elements : undefined;
      const typeOnly =
        clause !== undefined &&
        (clause.isTypeOnly ||
          (clause.name === undefined && elements !== undefined && elements.every((e) => e.isTypeOnly)));
      const names =
        clause?.name === undefined && elements !== undefined
          ? elements.map((e) => (e.propertyName ?? e.name).text)
          : undefined;
      add(node, node.moduleSpecifier.text, typeOnly, names);
    } else if (
      ts.isExportDeclaration(node) &&
      node.moduleSpecifier !== undefined &&
      ts.isStringLiteral(node.moduleSpecifier)
    ) {
      add(node, node.moduleSpecifier.text, node.isTypeOnly);
    } else if (
      ts.isCallExpression(node) &&
      node.expression.kind === ts.SyntaxKind.ImportKeyword &&
      node.arguments[0] !== undefined &&
      ts.isStringLiteralLike(node.arguments[0])
    ) {
      add(node, node.arguments[0].text, false);
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
  return found;
}

/** The src/ file a relative specifier names, or undefined for a package or a node: module. */
function target(from: string, specifier: string): string | undefined {
  if (!specifier.startsWith('.')) return undefined;
  return normalize(join(dirname(from), specifier)).replace(/\.js$/, '.ts');
}

/** The part of src/ a file belongs to: the most specific name LAYERS knows. */
function partOf(file: string): string | undefined {
  const parts = file.split('/');
  const candidates = [parts.slice(0, 2).join('/'), parts[0] ?? ''];
  return candidates.find((name) => LAYERS.some((layer) => layer.includes(name)));
}

function layerOf(part: string): number {
  return LAYERS.findIndex((layer) => layer.includes(part));
}

function isPure(file: string): boolean {
  const within = (entry: string): boolean => file === entry || file.startsWith(entry + '/');
  if (PURE.some((entry) => entry.startsWith('!') && within(entry.slice(1)))) return false;
  return PURE.some((entry) => !entry.startsWith('!') && within(entry));
}

const FILES = sourceFiles(SRC);
const IMPORTS = FILES.flatMap(importsOf);
const where = (i: Import): string => `src/${i.file}:${i.line} imports '${i.specifier}'`;

test('every part of src/ has a layer, and imports only parts in lower layers', () => {
  const problems: string[] = [];
  for (const file of FILES) {
    if (partOf(file) === undefined) problems.push(`src/${file} is in no layer: add its folder to LAYERS`);
  }
  for (const i of IMPORTS) {
    const to = target(i.file, i.specifier);
    if (to === undefined) continue;
    if (!FILES.includes(to)) {
      problems.push(`${where(i)}: no such file in src/`);
      continue;
    }
    const [fromPart, toPart] = [partOf(i.file), partOf(to)];
    if (fromPart === undefined || toPart === undefined || fromPart === toPart) continue;
    const [fromLayer, toLayer] = [layerOf(fromPart), layerOf(toPart)];
    if (toLayer >= fromLayer) {
      problems.push(
        `${where(i)}: ${fromPart} (layer ${fromLayer}) may not depend on ${toPart} (layer ${toLayer}), ` +
          'only on lower layers: move what both need down',
      );
    }
  }
  assert.ok(IMPORTS.length > 500, `read only ${IMPORTS.length} imports: is the parser finding them?`);
  assert.deepEqual(problems, []);
});

test('pure modules import no I/O, load only pure modules, and call no clock, timer or random source', () => {
  const pure = FILES.filter(isPure);
  assert.ok(pure.length >= 60, `found ${pure.length} pure files; PURE is out of date`);
  const problems: string[] = [];
  for (const i of IMPORTS) {
    if (!isPure(i.file) || i.typeOnly) continue;
    const to = target(i.file, i.specifier);
    const name = i.specifier.replace(/^node:/, '');
    if (to !== undefined) {
      if (!isPure(to)) problems.push(`${where(i)}: a pure module loads src/${to}, which is not pure`);
    } else if (IO_MODULES.has(name)) {
      problems.push(`${where(i)}: a pure module loads an I/O module`);
    } else if (name === 'crypto' && (i.names === undefined || i.names.some((n) => CRYPTO_RANDOM.test(n)))) {
      problems.push(`${where(i)}: a pure module may take hashes from node:crypto by name, never randomness`);
    }
  }
  for (const file of pure) {
    readFileSync(join(SRC, file), 'utf8')
      .split('\n')
      .forEach((line, index) => {
        // Comments cannot do anything at run time.
        if (/^\s*(\/\/|\*|\/\*)/.test(line)) return;
        for (const [pattern, reason] of BANNED_CALLS) {
          if (pattern.test(line)) problems.push(`src/${file}:${index + 1} ${reason}: ${line.trim()}`);
        }
      });
  }
  assert.deepEqual(problems, []);
});
