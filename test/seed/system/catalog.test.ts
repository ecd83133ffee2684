/**
 * The catalog store in-process: compare-and-swap commits, and state that survives reopening through
 * the journal, a snapshot plus the journal after it, and a torn journal tail. Then the same through
 * the scheduler's HTTP routes.
 */

import assert from 'node:assert/strict';
import { appendFile, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { buildManifest } from '../../../src/manifest/build.js';
import { manifestDigest, type Manifest } from '../../../src/manifest/manifest.js';
import { LocalOrigin } from '../../../src/origin/local.js';
import { CatalogClient } from '../../../src/seed/catalog/client.js';
import { catalogRoutes } from '../../../src/seed/catalog/routes.js';
import { CatalogStore } from '../../../src/seed/catalog/store.js';
import { startScheduler } from '../../../src/swarm/scheduler/scheduler-server.js';
import { tempDir, writeSmallModel } from '../../helpers/fixtures.js';
import { isWeightcastError } from '../../../src/errors.js';

let work: { path: string; cleanup: () => Promise<void> };
let manifest: Manifest;
let hex: string;

before(async () => {
  work = await tempDir('seed-catalog');
  await writeSmallModel(join(work.path, 'model'));
  const origin = new LocalOrigin(join(work.path, 'model'));
  manifest = await buildManifest(origin, { pieceSize: 256 * 1024 }).finally(() => origin.close());
  hex = manifestDigest(manifest).slice('sha256:'.length);
});

after(async () => {
  await work.cleanup();
});

const pieceCount = (): number => manifest.files.reduce((sum, file) => sum + file.pieces.length, 0);

async function seeded(dir: string, options: { snapshotEveryRecords?: number } = {}): Promise<CatalogStore> {
  const store = await CatalogStore.open(dir, options);
  await store.registerNode('a', 'http://127.0.0.1:1');
  await store.registerNode('b', 'http://127.0.0.1:2');
  await store.createModel(
    manifest,
    Array.from({ length: pieceCount() }, (_, index) => [index % 2 === 0 ? 'a' : 'b']),
  );
  return store;
}

describe('catalog store', () => {
  it('commits only when the entry still has the expected version', async () => {
    const store = await seeded(join(work.path, 'cas'));
    try {
      const [first] = await store.commit(hex, [{ piece: 0, expectVersion: 1, holders: ['b'] }]);
      assert.deepEqual(first, { piece: 0, ok: true, version: 2 });
      const [stale] = await store.commit(hex, [{ piece: 0, expectVersion: 1, holders: ['a'] }]);
      assert.deepEqual(stale, { piece: 0, ok: false, version: 2 });
      assert.deepEqual(store.snapshot(hex).pieces[0]?.holders, ['b']);
      // Updates of one piece in one call apply in order.
      const both = await store.commit(hex, [
        { piece: 1, expectVersion: 1, holders: ['a'] },
        { piece: 1, expectVersion: 2, holders: ['a', 'b'] },
      ]);
      assert.deepEqual(
        both.map((result) => result.ok),
        [true, true],
      );
      await assert.rejects(
        store.commit(hex, [{ piece: 2, expectVersion: 1, holders: ['nobody'] }]),
        (error: unknown) => isWeightcastError(error, 'SEED_UNKNOWN_NODE'),
      );
    } finally {
      await store.close();
    }
  });

  it('survives reopening: journal, snapshot plus journal, and a torn tail', async () => {
    const dir = join(work.path, 'durable');
    let store = await seeded(dir, { snapshotEveryRecords: 4 });
    for (let round = 0; round < 3; round++) {
      await store.commit(hex, [
        { piece: 0, expectVersion: 1 + round, holders: [round % 2 === 0 ? 'b' : 'a'] },
      ]);
    }
    const expected = store.snapshot(hex);
    assert.ok(store.snapshotSequence > 0, 'a snapshot was taken');
    await store.close();
    // A crash in the middle of an append leaves half a line: it was never acknowledged.
    await appendFile(join(dir, 'journal'), 'deadbeefdeadbeef {"seq":99,"rec');
    store = await CatalogStore.open(dir, { snapshotEveryRecords: 4 });
    try {
      assert.deepEqual(store.snapshot(hex), expected);
      assert.ok(
        !(await readFile(join(dir, 'journal'), 'utf8')).includes('deadbeef'),
        'the torn tail was cut off',
      );
      const [next] = await store.commit(hex, [{ piece: 0, expectVersion: 4, holders: ['a', 'b'] }]);
      assert.equal(next?.ok, true);
    } finally {
      await store.close();
    }
    store = await CatalogStore.open(dir);
    try {
      assert.deepEqual(store.snapshot(hex).pieces[0], {
        index: 0,
        sizeBytes: expected.pieces[0]!.sizeBytes,
        holders: ['a', 'b'],
        version: 5,
      });
    } finally {
      await store.close();
    }
  });

  it('answers over the scheduler: register, create, read, commit, conflicts', async () => {
    const store = await CatalogStore.open(join(work.path, 'http'));
    const scheduler = await startScheduler({ catalog: catalogRoutes(store) });
    try {
      const client = new CatalogClient(scheduler.url);
      await client.registerNode('n1', 'http://127.0.0.1:9');
      await client.registerNode('n2', 'http://127.0.0.1:10', { active: false });
      // Registering again without a flag keeps an operator's drain.
      assert.equal((await client.registerNode('n2', 'http://127.0.0.1:11')).active, false);
      assert.equal(await client.snapshot(hex), undefined);
      const holders = Array.from({ length: pieceCount() }, () => ['n1']);
      await client.createModel(manifest, holders);
      // The same placement again is accepted (a put run twice); another one is a conflict.
      await client.createModel(manifest, holders);
      await assert.rejects(
        client.createModel(
          manifest,
          holders.map(() => ['n2']),
        ),
        (error: unknown) => isWeightcastError(error, 'SEED_CATALOG_CONFLICT'),
      );
      assert.equal(manifestDigest(await client.manifest(hex)), `sha256:${hex}`);
      const results = await client.commit(hex, [
        { piece: 0, expectVersion: 1, holders: ['n2'] },
        { piece: 1, expectVersion: 7, holders: ['n2'] },
      ]);
      assert.deepEqual(
        results.map((result) => result.ok),
        [true, false],
      );
      const snapshot = await client.requireSnapshot(hex);
      assert.deepEqual(snapshot.pieces[0]?.holders, ['n2']);
      assert.equal(snapshot.pieces[1]?.version, 1);
    } finally {
      await scheduler.close();
      await store.close();
    }
  });
});
