/**
 * The public API as a user gets it: `npm pack` the repository, unpack the tarball into a scratch
 * project's node_modules (its dependencies linked from this repository's node_modules, so nothing is
 * fetched), then import every `exports` subpath by the package's name, call one function of each,
 * type-check a TypeScript file that imports them through the `types` conditions and the README's
 * TypeScript examples, and run the bin.
 */

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdir, readFile, rename, symlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import ts from 'typescript';
import { merkleRoot } from '../src/manifest/merkle.js';
import { tempDir } from './helpers/fixtures.js';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const run = promisify(execFile);

interface PackageJson {
  name: string;
  version: string;
  bin: Record<string, string>;
  exports: Record<string, string | { types: string; default: string }>;
  dependencies: Record<string, string>;
}

/**
 * What a user needs and nothing else: the bin, the compiled library with its types, the Python reader,
 * the native helper's source.
 */
const SHIPPED = [
  /^package\.json$/,
  /^README\.md$/,
  // The `weightcast` command (a launcher), the Node entry it starts, and that entry as an ES module.
  /^bin\/weightcast(\.c?js)?$/,
  /^python\/weightcast_reader\.py$/,
  // The route scripts of `agent` and `pull` are CommonJS (src/cli/route-cache.ts).
  /^dist\/src\/.+\.(js|cjs|d\.ts)$/,
  // The native helper's source, built by npm (node-gyp) where the package is installed.
  /^binding\.gyp$/,
  /^native\/[a-z-]+\.[ch]$/,
];

const SUBPATH_CHECK = `
import { WeightcastError, synthesizeModel } from 'weightcast';
import { buildManifest, merkleRoot } from 'weightcast/manifest';
import { LocalOrigin, openOrigin, pull } from 'weightcast/pull';
import { loadModel } from 'weightcast/loader';
import { findLocalAgent, startScheduler } from 'weightcast/swarm';
import { placePieces } from 'weightcast/seed';

const [work, digestsJson] = process.argv.slice(2);
const out = {};
out.merkleRoot = merkleRoot(JSON.parse(digestsJson));
out.errorCode = new WeightcastError('USAGE', 'x').code;
await synthesizeModel({ dir: work + '/model', arch: 'llama', seed: 3, hidden: 64, layers: 2, vocab: 512 });
const local = new LocalOrigin(work + '/model');
const manifest = await buildManifest(local, { pieceSize: 64 * 1024, threads: 1 });
await local.close();
const origin = openOrigin(work + '/model');
const pulled = await pull(origin, work + '/pulled', { manifest });
await origin.close();
out.pulledBytes = pulled.bytesTotal;
const loaded = await loadModel(work + '/pulled', { to: work + '/loaded', format: 'hf', manifest });
out.loaded = { tensors: loaded.tensors, verified: loaded.verified };
out.agent = await findLocalAgent({ WEIGHTCAST_AGENT: 'off' });
const scheduler = await startScheduler({ host: '127.0.0.1', port: 0 });
out.schedulerUrl = scheduler.url;
await scheduler.close();
out.placement = placePieces([1, 1, 1], ['a', 'b', 'c'], { policy: 'round-robin', replicas: 0 });
console.log(JSON.stringify(out));
`;

const TYPES_CHECK = `
import { WeightcastError, type ErrorCode } from 'weightcast';
import { manifestDigest, type Manifest } from 'weightcast/manifest';
import { pull, type PullResult } from 'weightcast/pull';
import { loadModel, type LoadModelResult } from 'weightcast/loader';
import { Agent, agentPull, type ModelStatus } from 'weightcast/swarm';
import { putModel, type PutResult } from 'weightcast/seed';

export const code: ErrorCode = new WeightcastError('USAGE', 'x').code;
export function name(manifest: Manifest): string {
  return manifestDigest(manifest);
}
export type Results = [PullResult, LoadModelResult, ModelStatus, PutResult];
export const functions = [pull, loadModel, Agent.start, agentPull, putModel];
// A wrong type must be an error, so this line proves the types are real and not \`any\`.
// @ts-expect-error a digest is a string
export const wrong: number = manifestDigest({} as Manifest);
`;

async function readPackageJson(): Promise<PackageJson> {
  return JSON.parse(await readFile(join(ROOT, 'package.json'), 'utf8')) as PackageJson;
}

/** `npm pack` into `dir`: the tarball's path and the files it holds. */
async function pack(dir: string): Promise<{ tarball: string; files: string[] }> {
  // The suite has just built dist/; prepack would build it again under the running tests' feet.
  const args = ['pack', '--json', '--offline', '--ignore-scripts', '--pack-destination', dir];
  const { stdout } = await run('npm', args, {
    cwd: ROOT,
    maxBuffer: 16 * 1024 * 1024,
  });
  const [result] = JSON.parse(stdout) as Array<{ filename: string; files: Array<{ path: string }> }>;
  assert.ok(result !== undefined, stdout);
  return { tarball: join(dir, result.filename), files: result.files.map((file) => file.path) };
}

/** A scratch ESM project with the tarball unpacked as node_modules/weightcast, its bin linked. */
async function scratchProject(dir: string, tarball: string, pkg: PackageJson): Promise<string> {
  const project = join(dir, 'project');
  const modules = join(project, 'node_modules');
  await mkdir(modules, { recursive: true });
  await writeFile(join(project, 'package.json'), JSON.stringify({ name: 'scratch', type: 'module' }));
  await run('tar', ['-xzf', tarball, '-C', modules]);
  await rename(join(modules, 'package'), join(modules, pkg.name));
  for (const dependency of Object.keys(pkg.dependencies)) {
    await symlink(join(ROOT, 'node_modules', dependency), join(modules, dependency), 'dir');
  }
  // npm links each bin into node_modules/.bin by a relative link.
  await mkdir(join(modules, '.bin'));
  for (const [name, path] of Object.entries(pkg.bin)) {
    await symlink(join('..', pkg.name, path), join(modules, '.bin', name));
  }
  return project;
}

function typeErrors(files: readonly string[]): string[] {
  const program = ts.createProgram(files, {
    module: ts.ModuleKind.NodeNext,
    moduleResolution: ts.ModuleResolutionKind.NodeNext,
    target: ts.ScriptTarget.ES2022,
    strict: true,
    noEmit: true,
    skipLibCheck: true,
    types: ['node'],
    typeRoots: [join(ROOT, 'node_modules', '@types')],
  });
  return ts
    .getPreEmitDiagnostics(program)
    .map((d) => `${d.file?.fileName ?? ''}: ${ts.flattenDiagnosticMessageText(d.messageText, '\n')}`);
}

test('the package a user installs: only what it needs, every subpath importable by name, typed', async () => {
  const pkg = await readPackageJson();
  const temp = await tempDir('package');
  try {
    const { tarball, files } = await pack(temp.path);
    assert.deepEqual(
      files.filter((path) => !SHIPPED.some((pattern) => pattern.test(path))),
      [],
      'files in the tarball that a user does not need',
    );
    const subpaths = Object.entries(pkg.exports).filter(([subpath]) => subpath !== './package.json');
    assert.deepEqual(
      subpaths.map(([subpath]) => subpath),
      ['.', './manifest', './pull', './loader', './swarm', './seed'],
    );
    for (const [subpath, target] of subpaths) {
      assert.ok(typeof target === 'object', `${subpath} has types and default conditions`);
      for (const path of [target.types, target.default]) {
        assert.ok(files.includes(path.replace(/^\.\//, '')), `${subpath}: ${path} is in the tarball`);
      }
    }

    const project = await scratchProject(temp.path, tarball, pkg);
    await writeFile(join(project, 'check.mjs'), SUBPATH_CHECK);
    const digests = ['a', 'b', 'c'].map((letter) => letter.repeat(64));
    const work = join(temp.path, 'work');
    const { stdout } = await run(process.execPath, ['check.mjs', work, JSON.stringify(digests)], {
      cwd: project,
      timeout: 60_000,
    });
    const out = JSON.parse(stdout) as Record<string, unknown>;
    assert.equal(out['merkleRoot'], merkleRoot(digests));
    assert.equal(out['errorCode'], 'USAGE');
    assert.ok(typeof out['pulledBytes'] === 'number' && out['pulledBytes'] > 0, stdout);
    const loaded = out['loaded'] as { tensors: number; verified: boolean };
    assert.ok(loaded.tensors > 0 && loaded.verified, stdout);
    assert.deepEqual(out['agent'], { found: false, reason: 'disabled' });
    assert.match(String(out['schedulerUrl']), /^http:\/\/127\.0\.0\.1:\d+$/);
    assert.deepEqual(out['placement'], [['a'], ['b'], ['c']]);

    // The README's TypeScript examples are type-checked against the installed package too.
    const readme = await readFile(join(ROOT, 'README.md'), 'utf8');
    const examples = [...readme.matchAll(/^```ts\n([\s\S]*?)^```$/gm)].map((match) => match[1] ?? '');
    assert.ok(examples.length >= 5, `found ${examples.length} TypeScript examples in the README`);
    const checked = [join(project, 'check.ts')];
    await writeFile(checked[0] as string, TYPES_CHECK);
    for (const [index, example] of examples.entries()) {
      checked.push(join(project, `readme-${index + 1}.ts`));
      await writeFile(checked[index + 1] as string, example);
    }
    assert.deepEqual(typeErrors(checked), []);

    // The command as npm installs it: node_modules/.bin/weightcast, a link to the launcher.
    assert.equal(pkg.bin['weightcast'], 'bin/weightcast');
    const bin = join(project, 'node_modules', '.bin', 'weightcast');
    const version = await run(bin, ['--version'], { timeout: 30_000 });
    assert.equal(version.stdout.trim(), pkg.version);
  } finally {
    await temp.cleanup();
  }
});
