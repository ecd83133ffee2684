/**
 * A route script compiled with V8's code cache (src/cli/route-cache.ts): written by a run that had
 * none, used by the next, never offered to another version of the script, a damaged one rejected
 * without harm; the script's lazy imports work when its code came from the cache (Node 20 drops a
 * cached script's dynamic-import callback, hence `__routeImport`).
 */

import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { readdir, writeFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { basename, join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { cacheFileOf, loadRoute, runRoute } from '../../src/cli/route-cache.js';
import { tempDir } from '../helpers/fixtures.js';

/** A route-like script: `main` adds the arguments' lengths and what a lazily imported module says. */
function script(version: number): string {
  return [
    'const __routeUrl = require("node:url").pathToFileURL(__filename).href;',
    `exports.main = async (argv) => {`,
    `  const { answer } = await __routeImport("./lazy.mjs");`,
    `  const { sep } = await __routeImport("node:path");`,
    `  return argv.reduce((sum, word) => sum + word.length, 0) + answer + ${version} + (sep === "/" ? 0 : 0);`,
    `};`,
    `exports.own = __routeUrl;`,
  ].join('\n');
}

async function caches(dir: string): Promise<string[]> {
  return (await readdir(dir)).filter((name) => name.endsWith('.v8cache'));
}

/** A directory holding the route script (version 100) and its lazy module, removed after `body`. */
async function withRoute(label: string, body: (dir: string, file: string) => Promise<void>): Promise<void> {
  const dir = await tempDir(label);
  try {
    const file = join(dir.path, 'route.cjs');
    await writeFile(join(dir.path, 'lazy.mjs'), 'export const answer = 1000;\n');
    await writeFile(file, script(100));
    await body(dir.path, file);
  } finally {
    await dir.cleanup();
  }
}

test('the first run writes the cache, the next uses it, and lazy imports work from cached code', async () => {
  await withRoute('route-cache', async (dir, file) => {
    const first = loadRoute(file);
    assert.equal(first.cache, 'absent');
    assert.equal(await first.main(['ab', 'cde']), 1105);
    assert.equal(first.saveCache(), true);
    assert.ok(existsSync(cacheFileOf(file)));
    assert.deepEqual(await caches(dir), [basename(cacheFileOf(file))]);
    const second = loadRoute(file);
    assert.equal(second.cache, 'used');
    assert.equal(await second.main(['abcd']), 1104);
    // Nothing is written when the cache was used.
    assert.equal(second.saveCache(), true);
    assert.equal(await runRoute(file, ['a']), 1101);
  });
});

test("another version of the script is never offered the old one's cache; the old cache goes", async () => {
  await withRoute('route-cache-version', async (dir, file) => {
    const old = loadRoute(file);
    old.saveCache();
    const oldCache = cacheFileOf(file);
    // The same length, other code: V8 alone would take the old cache (it checks the length only).
    await new Promise((resolve) => setTimeout(resolve, 20));
    await writeFile(file, script(200));
    assert.notEqual(cacheFileOf(file), oldCache);
    const changed = loadRoute(file);
    assert.equal(changed.cache, 'absent');
    assert.equal(await changed.main([]), 1200);
    changed.saveCache();
    assert.deepEqual(await caches(dir), [basename(cacheFileOf(file))]);
  });
});

test('a damaged cache is rejected: the script compiles and runs as without one, and the cache is written again', async () => {
  await withRoute('route-cache-damaged', async (_dir, file) => {
    await writeFile(cacheFileOf(file), Buffer.alloc(4096, 0xa5));
    const damaged = loadRoute(file);
    assert.equal(damaged.cache, 'rejected');
    assert.equal(await damaged.main(['xy']), 1102);
    assert.equal(damaged.saveCache(), true);
    assert.equal(loadRoute(file).cache, 'used');
  });
});

test('the CommonJS build of the loader, which bin/weightcast.cjs requires, runs a route and its lazy imports from cached code', async (t) => {
  const bundled = fileURLToPath(new URL('../../src/cli/route-cache.cjs', import.meta.url));
  if (!existsSync(bundled)) {
    t.skip('no route-cache.cjs in dist (built by plain tsc)');
    return;
  }
  const loader = createRequire(import.meta.url)(bundled) as {
    runRoute: typeof runRoute;
    loadRoute: typeof loadRoute;
  };
  await withRoute('route-cache-cjs', async (_dir, file) => {
    assert.equal(await loader.runRoute(file, ['ab']), 1102);
    const cached = loader.loadRoute(file);
    assert.equal(cached.cache, 'used');
    assert.equal(await cached.main(['abc']), 1103);
  });
});

test('a script without a main function is an error, not a silent exit', async () => {
  const dir = await tempDir('route-cache-main');
  try {
    const file = join(dir.path, 'route.cjs');
    await writeFile(file, 'exports.other = 1;\n');
    assert.throws(() => loadRoute(file), /exports no main function/);
  } finally {
    await dir.cleanup();
  }
});
