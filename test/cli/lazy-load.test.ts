/**
 * The CLI loads only what a command needs: help, and a command stopped by its own flags, read the
 * definitions in src/cli/definitions and never the implementations in src/cli/commands (the swarm,
 * the loader, the seed tier, zod, undici); `agent` and `pull` run their route file (one script from
 * the CLI's start to the end of their usual route, scripts/bundle-commands.ts, through
 * cli/route-cache.cjs) and load nothing else of ours until they run; a swarm agent starts without undici, zod (its wire checks are
 * util/schema.ts: zod cost ~0.1 CPU-s per cold start) or the seed tier.
 * Checked on the real process through a module-load hook, by what is loaded rather than by how long
 * it takes.
 */

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import { once } from 'node:events';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { createInterface } from 'node:readline';
import { promisify } from 'node:util';
import { tempDir } from '../helpers/fixtures.js';

const ROOT = fileURLToPath(new URL('../../../', import.meta.url));
const BIN = join(ROOT, 'bin', 'weightcast.js');
const HOOK = fileURLToPath(new URL('../helpers/module-log.js', import.meta.url));
const SRC = pathToFileURL(join(ROOT, 'dist', 'src')).href + '/';

interface Edge {
  parent: string;
  child: string;
}

/** Runs the CLI with `argv` and returns every import it resolved; the exit code is not checked here. */
async function importsOf(argv: readonly string[]): Promise<Edge[]> {
  const dir = await tempDir('lazy-load');
  try {
    const log = join(dir.path, 'modules.log');
    await promisify(execFile)(process.execPath, ['--import', HOOK, BIN, ...argv], {
      env: { ...process.env, WEIGHTCAST_MODULE_LOG: log },
    }).catch((error: unknown) => error);
    return parseLog(await readFile(log, 'utf8'));
  } finally {
    await dir.cleanup();
  }
}

function parseLog(text: string): Edge[] {
  return text
    .split('\n')
    .filter((line) => line.length > 0)
    .map((line) => {
      const [parent = '', child = ''] = line.split(' -> ');
      return { parent, child };
    });
}

function packageOf(url: string): string | undefined {
  return /\/node_modules\/((?:@[^/]+\/)?[^/]+)\//.exec(url)?.[1];
}

function sourcePath(url: string): string | undefined {
  return url.startsWith(SRC) ? url.slice(SRC.length) : undefined;
}

for (const argv of [
  ['--help'],
  ['pull', '--help'],
  ['agent', '--help'],
  ['serve', '--help'],
  ['--version'],
]) {
  test(`weightcast ${argv.join(' ')} loads no command implementation`, async () => {
    assertNoImplementation(await importsOf(argv));
  });
}

/** Only commander, the definitions, and outside the CLI modules of constants: no implementation. */
function assertNoImplementation(edges: readonly Edge[]): void {
  const loaded = new Set(edges.map((edge) => edge.child));
  // The hook saw the process: without this the test could pass on an empty log.
  assert.ok(
    [...loaded].some((url) => packageOf(url) === 'commander'),
    `commander not seen in ${[...loaded].join(', ')}`,
  );
  const packages = new Set([...loaded].flatMap((url) => packageOf(url) ?? []));
  assert.deepEqual([...packages], ['commander']);
  const sources = [...loaded].flatMap((url) => sourcePath(url) ?? []);
  assert.ok(sources.includes('cli/definitions/index.js'), sources.join(', '));
  assert.deepEqual(
    sources.filter((path) => path.startsWith('cli/commands/')),
    [],
    'a definition imports its command at run time',
  );
  // Outside the CLI, help may only read constants: modules that import nothing but each other.
  const heavy = edges.filter((edge) => {
    const parent = sourcePath(edge.parent);
    return parent !== undefined && !parent.startsWith('cli/') && sourcePath(edge.child) === undefined;
  });
  assert.deepEqual(
    heavy.map((edge) => `${sourcePath(edge.parent)} imports ${edge.child}`),
    [],
    'a module the CLI reads for its help does more than hold constants',
  );
}

test('weightcast agent, stopped by its flags, loads its route file, then what help loads', async () => {
  // `agent` and `pull` begin with their route file (bin/weightcast.js): the agent's code is loaded
  // with it, not run; a command line it cannot read goes to commander's program and definitions.
  // The route file is a script run by cli/route-cache.cjs (with V8's code cache), neither imported
  // nor required: the hook sees its loader.
  const edges = await importsOf(['agent']);
  const sources = edges.flatMap((edge) => sourcePath(edge.child) ?? []);
  assert.ok(sources.includes('cli/route-cache.cjs'), sources.join(', '));
  assertNoImplementation(edges);
});

for (const argv of [['--help'], ['--version'], ['pul']]) {
  test(`weightcast ${argv.join(' ')} loads no command's definition (the list of commands is enough)`, async () => {
    const sources = (await importsOf(argv)).flatMap((edge) => sourcePath(edge.child) ?? []);
    assert.ok(sources.includes('cli/definitions/index.js'), sources.join(', '));
    assert.deepEqual(
      sources.filter((path) => path.startsWith('cli/definitions/') && path !== 'cli/definitions/index.js'),
      [],
    );
  });
}

test('a pull whose command line reads cleanly runs without commander; one that does not, with it', async () => {
  const dir = await tempDir('lazy-load-pull');
  try {
    const to = join(dir.path, 'to');
    const clean = await importsOf(['pull', join(dir.path, 'missing'), '--to', to, '--no-agent']);
    const cleanPackages = new Set(clean.flatMap((edge) => packageOf(edge.child) ?? []));
    // The hook saw the pull itself run (its implementation), not only the CLI.
    assert.ok(
      clean.some((edge) => sourcePath(edge.child)?.startsWith('cli/commands/pull') === true),
      clean.map((edge) => edge.child).join(', '),
    );
    assert.ok(!cleanPackages.has('commander'), [...cleanPackages].join(', '));
    const mistyped = await importsOf(['pull', join(dir.path, 'missing'), '--to', to, '--no-agnet']);
    assert.ok(mistyped.some((edge) => packageOf(edge.child) === 'commander'));
  } finally {
    await dir.cleanup();
  }
});

test('a swarm agent listens without loading undici, zod or the seed tier', async () => {
  const dir = await tempDir('lazy-load-agent');
  try {
    const log = join(dir.path, 'modules.log');
    // Nothing needs the scheduler before a model is joined, so an address with no server will do.
    const argv = [
      'agent',
      '--scheduler',
      'http://127.0.0.1:9',
      '--cache',
      join(dir.path, 'cache'),
      '--port',
      '0',
    ];
    const child = spawn(process.execPath, ['--import', HOOK, BIN, ...argv], {
      env: { ...process.env, WEIGHTCAST_MODULE_LOG: log },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    const exited = once(child, 'exit');
    try {
      const lines = createInterface({ input: child.stdout });
      const listening = new Promise<void>((resolve) =>
        lines.on('line', (line) => {
          if (line.includes('listening on')) resolve();
        }),
      );
      await Promise.race([
        listening,
        exited.then(() => assert.fail('the agent exited before it listened')),
        new Promise((_, reject) =>
          setTimeout(() => reject(new Error('no listening line in 15 s')), 15_000).unref(),
        ),
      ]);
    } finally {
      child.kill('SIGTERM');
      await exited;
    }
    const loaded = parseLog(await readFile(log, 'utf8')).map((edge) => edge.child);
    // The build puts the agent's usual route in one file (scripts/bundle-commands.ts; its modules
    // wrapped, as `Agent = class _Agent`), a plain tsc build leaves one file per module: the checks
    // read what the loaded files define, so they hold for either.
    // The route script, which cli/route-cache.cjs runs (the hook sees its loader, not the script).
    const routeScript = loaded.some((url) => sourcePath(url) === 'cli/route-cache.cjs')
      ? [`${SRC}cli/route/agent.cjs`]
      : [];
    const ours = await Promise.all(
      [...loaded, ...routeScript]
        .flatMap((url) => (sourcePath(url) === undefined ? [] : [url]))
        .map(async (url) => ({
          url,
          text: await readFile(fileURLToPath(url), 'utf8'),
        })),
    );
    assert.ok(
      ours.some((file) => /^export class Agent \{|^\s*(var )?Agent = class\b/m.test(file.text)),
      `the agent's code not among ${ours.map((file) => file.url).join(', ')}`,
    );
    assert.deepEqual(
      loaded.filter((url) => packageOf(url) === 'undici' || packageOf(url) === 'zod'),
      [],
    );
    // Its command line reads cleanly, so commander is not loaded either (cli/command-spec.ts).
    assert.deepEqual(
      loaded.filter((url) => packageOf(url) === 'commander'),
      [],
    );
    assert.deepEqual(
      ours.filter((file) => /class SeedNode\b|\bSeedNode = class\b/.test(file.text)).map((file) => file.url),
      [],
      'the seed tier was loaded',
    );
  } finally {
    await dir.cleanup();
  }
});
