/**
 * Placing verified files into a destination without reading them: reflink, hard link or kernel copy,
 * on the same file system and onto another one (/dev/shm when this machine has it).
 */

import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { mkdtemp, readdir, rm, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { buildManifest } from '../../src/manifest/build.js';
import type { Manifest } from '../../src/manifest/manifest.js';
import { LocalOrigin } from '../../src/origin/local.js';
import { placeFiles, someFilesPresent } from '../../src/pull/place.js';
import { sameFiles, tempDir, writeSmallModel } from '../helpers/fixtures.js';

let work: { path: string; cleanup: () => Promise<void> };
let source: string;
let manifest: Manifest;
let paths: string[];

before(async () => {
  work = await tempDir('place');
  source = join(work.path, 'cache');
  await writeSmallModel(source);
  const origin = new LocalOrigin(source);
  manifest = await buildManifest(origin, { pieceSize: 64 * 1024 }).finally(() => origin.close());
  paths = manifest.files.map((file) => file.path);
});

after(async () => {
  await work.cleanup();
});

describe('placeFiles', () => {
  it('copies or reflinks every file on the same file system, leaving no scaffolding', async () => {
    const to = join(work.path, 'copied');
    const result = await placeFiles(source, to, manifest);
    assert.equal(result.methods.copy + result.methods.reflink, manifest.files.length);
    assert.equal(result.methods.link, 0);
    assert.ok(await sameFiles(source, to, paths));
    // Not links: the destination's files are files of their own.
    for (const path of paths) {
      assert.notEqual((await stat(join(to, path))).ino, (await stat(join(source, path))).ino);
    }
    assert.deepEqual(
      (await readdir(to)).sort(),
      [
        'config.json',
        'model-00001-of-00002.safetensors',
        'model-00002-of-00002.safetensors',
        'model.safetensors.index.json',
        'sub',
      ].sort(),
    );
  });

  it('hard-links on request on the same file system', async () => {
    const to = join(work.path, 'linked');
    const result = await placeFiles(source, to, manifest, { mode: 'link' });
    assert.equal(result.methods.link, manifest.files.length);
    for (const path of paths) {
      assert.equal((await stat(join(to, path))).ino, (await stat(join(source, path))).ino);
    }
  });

  it(
    'copies instead of linking onto another file system',
    { skip: existsSync('/dev/shm') ? false : 'no /dev/shm here' },
    async (t) => {
      const to = await mkdtemp('/dev/shm/weightcast-place-');
      try {
        if ((await stat(to)).dev === (await stat(source)).dev) {
          t.skip('/dev/shm and the temporary directory are one file system here');
          return;
        }
        const result = await placeFiles(source, join(to, 'model'), manifest, { mode: 'link' });
        assert.equal(result.methods.copy + result.methods.reflink, manifest.files.length);
        assert.ok(await sameFiles(source, join(to, 'model'), paths));
      } finally {
        await rm(to, { recursive: true, force: true });
      }
    },
  );

  it('refuses a destination where a file of the model already stands, and says so first', async () => {
    const to = join(work.path, 'taken');
    assert.equal(await someFilesPresent(to, manifest), false);
    await placeFiles(source, to, manifest);
    assert.equal(await someFilesPresent(to, manifest), true);
    await writeFile(join(to, 'config.json'), 'something else');
    await assert.rejects(placeFiles(source, to, manifest), { code: 'PULL_DESTINATION_CONFLICT' });
  });

  it('fails with a typed error when a source file is missing', async () => {
    const broken = {
      ...manifest,
      files: [...manifest.files, { ...manifest.files[0]!, path: 'missing.bin' }],
    };
    await assert.rejects(placeFiles(source, join(work.path, 'broken'), broken), { code: 'IO' });
  });
});
