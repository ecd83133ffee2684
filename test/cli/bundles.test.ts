/**
 * The build puts each CLI command in one file, and `agent`'s and `pull`'s usual routes in one file
 * each from the CLI's start (scripts/bundle-commands.ts); it rewrites every `import.meta.url` of a
 * module copied in to that module's own URL. Files found that way at run time (worker scripts, the
 * native helper) fail quietly or late when the URL is wrong, so each bundle's URLs are resolved here
 * against the files on disk. A route file must load nothing else of ours on its route, and leave
 * everything off it to the regular build. Nothing to check after a plain tsc build.
 */

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { readdir, readFile } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { mkdir, writeFile } from 'node:fs/promises';
import { buildManifest } from '../../src/manifest/build.js';
import { writeManifest } from '../../src/manifest/manifest.js';
import { LocalOrigin } from '../../src/origin/local.js';
import { ROUTES as ROUTE_MODULES } from '../../scripts/route-modules.js';
import { failingCli } from '../helpers/cli.js';
import { deterministicBytes, tempDir } from '../helpers/fixtures.js';

const ROOT = fileURLToPath(new URL('../../../', import.meta.url));
const COMMANDS = join(ROOT, 'dist', 'src', 'cli', 'commands');
const ROUTE_DIR = join(ROOT, 'dist', 'src', 'cli', 'route');
const SRC = join(ROOT, 'dist', 'src');
const NATIVE = join(ROOT, 'build', 'Release', 'weightcast_native.node');

/**
 * A module's own URL, as the bundler writes it: `new URL("../../x/y.js", import.meta.url).href`
 * (in a route script, whose own URL is `__routeUrl`).
 */
const OWN_URL = /new URL\("([^"]+)", (?:import\.meta\.url|__routeUrl)\)\.href/g;

async function bundles(): Promise<{ name: string; dir: string; text: string }[]> {
  const files = [];
  for (const dir of [COMMANDS, ROUTE_DIR]) {
    if (!existsSync(dir)) continue;
    const names = (await readdir(dir)).filter((name) => name.endsWith('.js') || name.endsWith('.cjs'));
    for (const name of names) files.push({ name, dir, text: await readFile(join(dir, name), 'utf8') });
  }
  return files.filter((file) => /(import\.meta\.url|__routeUrl)\)\.href/.test(file.text));
}

test('every module URL a command bundle computes names its module, and what it loads by that URL is there', async (t) => {
  const found = await bundles();
  if (found.length === 0) {
    t.skip('no bundled commands in dist (built by plain tsc)');
    return;
  }
  let urls = 0;
  let relatives = 0;
  for (const { name, dir, text } of found) {
    for (const match of text.matchAll(OWN_URL)) {
      const own = resolve(dir, match[1] ?? '');
      urls += 1;
      // The module the code came from is still there (tsc's output stays beside the bundles).
      assert.ok(existsSync(own), `${name}: ${match[1]} resolves to ${own}, which does not exist`);
      // A file next to it, named relative to it: a worker script...
      const after = text.slice((match.index ?? 0) - 200, match.index ?? 0);
      const worker = /new URL\("([^"]+)", $/.exec(after);
      if (worker !== null) {
        relatives += 1;
        const path = resolve(dirname(own), worker[1] ?? '');
        assert.ok(existsSync(path), `${name}: worker ${worker[1]} of ${match[1]} is not at ${path}`);
      }
      // ...or the native helper, loaded with require relative to it.
      const required = /^\)\("([^"]+)"\)/.exec(text.slice((match.index ?? 0) + match[0].length));
      if (required !== null) {
        relatives += 1;
        const path = resolve(dirname(own), required[1] ?? '');
        assert.equal(path, NATIVE, `${name}: the native helper is looked for at ${path}`);
      }
    }
  }
  // The agent's and the pull's bundles do compute URLs: a pattern that matched nothing proves nothing.
  assert.ok(urls >= 2 && relatives >= 2, `only ${urls} module URLs and ${relatives} files relative to them`);
});

/**
 * The files of ours a route script requires at its start (`require("./x.js")`) and imports lazily
 * (through its loader: `__routeImport("./x.js")`), the packages it requires (Node's own modules
 * aside), and any dynamic import left as such (which a script compiled from a code cache cannot run).
 */
function importsOfRoute(text: string): {
  statics: string[];
  lazies: string[];
  packages: string[];
  dynamicImports: number;
} {
  const ours = (specifier: string): string[] =>
    specifier.startsWith('.') ? [resolve(ROUTE_DIR, specifier).slice(SRC.length + 1)] : [];
  const required = [...text.matchAll(/\brequire\("([^"]+)"\)/g)].map((m) => m[1] ?? '');
  return {
    statics: required.flatMap(ours),
    lazies: [...text.matchAll(/\b__routeImport\("([^"]+)"\)/g)].flatMap((m) => ours(m[1] ?? '')),
    packages: required.filter((specifier) => !specifier.startsWith('.') && !specifier.startsWith('node:')),
    dynamicImports: [...text.matchAll(/\bimport\(/g)].length,
  };
}

test("a route file holds its command's usual route: nothing else of ours is loaded on it", async (t) => {
  // bin/weightcast.cjs routes exactly these commands.
  const bin = await readFile(join(ROOT, 'bin', 'weightcast.cjs'), 'utf8');
  const routed = [...bin.matchAll(/argv\[0\] === '([a-z]+)'/g)].map((match) => match[1]);
  assert.deepEqual(routed.sort(), Object.keys(ROUTE_MODULES).sort());
  if (!existsSync(ROUTE_DIR)) {
    t.skip('no route files in dist (built by plain tsc)');
    return;
  }
  for (const [name, modules] of Object.entries(ROUTE_MODULES)) {
    const { statics, lazies, packages, dynamicImports } = importsOfRoute(
      await readFile(join(ROUTE_DIR, `${name}.cjs`), 'utf8'),
    );
    assert.deepEqual(statics, [], `${name}.cjs requires files of ours at its start`);
    // commander, undici and zod come only with what needs them (help, an HTTPS origin, a manifest).
    assert.deepEqual(packages, [], `${name}.cjs requires packages at its start`);
    assert.equal(dynamicImports, 0, `${name}.cjs has dynamic imports its loader does not see`);
    // Off the route: other definitions, commander's program, other commands, all as built.
    assert.ok(lazies.includes('cli/program.js'), `${name}.cjs: ${lazies.join(', ')}`);
    for (const lazy of lazies) {
      assert.ok(!modules.includes(lazy), `${name}.cjs leaves ${lazy}, on its route, to another file`);
      assert.ok(existsSync(join(SRC, lazy)), `${name}.cjs imports ${lazy}, which the build did not make`);
    }
  }
});

test('an error thrown off the route (another copy of the errors module) is reported as the typed error it is', async () => {
  // `pull --scheduler` reads its manifest with the regular build's manifest module, which throws
  // its own copy's WeightcastError into the route file's error report (src/errors.ts marks them).
  const dir = await tempDir('route-errors');
  try {
    const model = join(dir.path, 'model');
    await mkdir(model);
    await writeFile(join(model, 'a.bin'), deterministicBytes('route-errors', 4096));
    const manifestPath = join(dir.path, 'manifest.json');
    await writeManifest(manifestPath, await buildManifest(new LocalOrigin(model)));
    const argv = ['pull', model, '--to', join(dir.path, 'to'), '--manifest', manifestPath];
    const failed = await failingCli([
      ...argv,
      ...['--digest', `sha256:${'0'.repeat(64)}`, '--scheduler', 'http://127.0.0.1:9', '--json'],
    ]);
    assert.equal(failed.code, 2, failed.stderr);
    const event = JSON.parse(failed.stdout?.trim().split('\n').at(-1) ?? '') as {
      event: string;
      error: { code: string };
    };
    assert.equal(event.event, 'error');
    assert.equal(event.error.code, 'MANIFEST_DIGEST_MISMATCH');
  } finally {
    await dir.cleanup();
  }
});
