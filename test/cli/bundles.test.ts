/**
 * The build puts each CLI command in one file (scripts/bundle-commands.ts) and rewrites every
 * `import.meta.url` of a module copied in to that module's own URL. Files found that way at run time
 * (worker scripts, the native helper) fail quietly or late when the URL is wrong, so each bundle's
 * URLs are resolved here against the files on disk. Nothing to check after a plain tsc build.
 */

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { readdir, readFile } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('../../../', import.meta.url));
const COMMANDS = join(ROOT, 'dist', 'src', 'cli', 'commands');
const NATIVE = join(ROOT, 'build', 'Release', 'weightcast_native.node');

/** A module's own URL, as the bundler writes it: `new URL("../../x/y.js", import.meta.url).href`. */
const OWN_URL = /new URL\("([^"]+)", import\.meta\.url\)\.href/g;

async function bundles(): Promise<{ name: string; text: string }[]> {
  const names = (await readdir(COMMANDS)).filter((name) => name.endsWith('.js'));
  const files = await Promise.all(
    names.map(async (name) => ({ name, text: await readFile(join(COMMANDS, name), 'utf8') })),
  );
  return files.filter((file) => file.text.includes('import.meta.url).href'));
}

test('every module URL a command bundle computes names its module, and what it loads by that URL is there', async (t) => {
  const found = await bundles();
  if (found.length === 0) {
    t.skip('no bundled commands in dist (built by plain tsc)');
    return;
  }
  let urls = 0;
  let relatives = 0;
  for (const { name, text } of found) {
    for (const match of text.matchAll(OWN_URL)) {
      const own = resolve(COMMANDS, match[1] ?? '');
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
