/**
 * The piece store's contract: only verified bytes are written, counted and served; a file is under
 * its final name only when complete and correct; a reopened store keeps what it verified within a
 * boot and hashes it again after a reboot. (A full disk: test/swarm-system/disk-full.test.ts.)
 */

import assert from 'node:assert/strict';
import { readFile, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { buildManifest } from '../../src/manifest/build.js';
import type { Manifest } from '../../src/manifest/manifest.js';
import { LocalOrigin } from '../../src/origin/local.js';
import { PieceMap } from '../../src/piece/piece-map.js';
import { PieceStore } from '../../src/piece/store.js';
import { INLINE_WRITE_BACKOFF_MS } from '../../src/piece/write-policy.js';
import { tempDir, writeAt, writeSmallModel } from '../helpers/fixtures.js';

let work: { path: string; cleanup: () => Promise<void> };
let source: string;
let manifest: Manifest;
let map: PieceMap;

before(async () => {
  work = await tempDir('piece-store');
  source = join(work.path, 'origin');
  await writeSmallModel(source);
  const origin = new LocalOrigin(source);
  manifest = await buildManifest(origin, { pieceSize: 64 * 1024 }).finally(() => origin.close());
  map = new PieceMap(manifest);
});

after(async () => {
  await work.cleanup();
});

async function pieceBytes(piece: number): Promise<Buffer> {
  const where = map.locate(piece);
  const file = await readFile(join(source, where.file.path));
  return file.subarray(where.offset, where.offset + where.length);
}

function storeDirs(name: string): { dataDir: string; stateDir: string; finalDir: string } {
  const root = join(work.path, name);
  return { dataDir: join(root, 'partial'), stateDir: join(root, 'state'), finalDir: join(root, 'final') };
}

describe('PieceStore', () => {
  it('writes, counts and serves only verified bytes', async () => {
    const dirs = storeDirs('verified-only');
    const store = await PieceStore.open(map, { dataDir: dirs.dataDir, stateDir: dirs.stateDir });
    try {
      const good = await pieceBytes(1);
      const bad = Buffer.from(good);
      bad[10] = (bad[10] ?? 0) ^ 0xff;
      assert.equal(await store.put(1, bad), 'corrupt');
      assert.equal(await store.put(1, good.subarray(1)), 'corrupt');
      assert.equal(store.has(1), false);
      await assert.rejects(store.read(1, Buffer.alloc(good.length)), { code: 'SWARM_PIECE_NOT_HELD' });
      // Nothing of the corrupt copy reached the disk.
      const where = map.locate(1);
      const onDisk = await readFile(join(dirs.dataDir, where.file.path));
      assert.ok(onDisk.subarray(where.offset, where.offset + where.length).every((byte) => byte === 0));
      assert.equal(await store.put(1, good), 'stored');
      assert.equal(await store.put(1, good), 'duplicate');
      const back = Buffer.alloc(good.length);
      assert.equal(await store.read(1, back), good.length);
      assert.ok(back.equals(good));
      assert.equal(store.heldCount, 1);
    } finally {
      await store.close();
    }
  });

  it('writes on an idle loop, and sends writes to the pool while the loop is busy or after a slow one', async () => {
    const dirs = storeDirs('inline-writes');
    let busy = 0;
    let t = 0;
    let step = 0;
    const store = await PieceStore.open(map, {
      dataDir: dirs.dataDir,
      stateDir: dirs.stateDir,
      inlineWrites: true,
      loopBusy: () => busy,
      clock: () => (t += step),
    });
    try {
      const sizes = [0, 1, 2, 3].map((piece) => map.locate(piece).length);
      assert.equal(await store.put(0, await pieceBytes(0)), 'stored');
      assert.equal(store.inlineBytes, sizes[0], 'an idle loop writes inline');
      busy = 0.9;
      assert.equal(await store.put(1, await pieceBytes(1)), 'stored');
      assert.equal(store.inlineBytes, sizes[0], 'a busy loop leaves the write to the pool');
      // Every reading of the clock moves it on 300 ms: the next inline write takes longer than allowed.
      busy = 0;
      step = 300;
      assert.equal(await store.put(2, await pieceBytes(2)), 'stored');
      assert.equal(store.inlineBytes, (sizes[0] ?? 0) + (sizes[2] ?? 0));
      step = 0;
      assert.equal(await store.put(3, await pieceBytes(3)), 'stored');
      assert.equal(store.inlineBytes, (sizes[0] ?? 0) + (sizes[2] ?? 0), 'after a slow write, the pool');
      t += INLINE_WRITE_BACKOFF_MS;
      assert.equal(await store.put(4, await pieceBytes(4)), 'stored');
      assert.ok(
        store.inlineBytes > (sizes[0] ?? 0) + (sizes[2] ?? 0),
        'inline again once the back-off ended',
      );
      for (const piece of [0, 1, 2, 3, 4]) {
        const back = Buffer.alloc(map.locate(piece).length);
        await store.read(piece, back);
        assert.ok(back.equals(await pieceBytes(piece)), `piece ${piece} reads back`);
      }
    } finally {
      await store.close();
    }
  });

  it('puts a file under its final name only once every piece of it is verified', async () => {
    const dirs = storeDirs('final-names');
    const store = await PieceStore.open(map, dirs);
    try {
      const fileIndex = manifest.files.findIndex((file) => file.pieces.length > 2);
      const file = manifest.files[fileIndex]!;
      const pieces = file.pieces.map((_, p) => map.globalIndex(fileIndex, p));
      for (const piece of pieces.slice(0, -1))
        assert.equal(await store.put(piece, await pieceBytes(piece)), 'stored');
      assert.equal(await stat(join(dirs.finalDir, file.path)).catch(() => undefined), undefined);
      await store.put(pieces.at(-1)!, await pieceBytes(pieces.at(-1)!));
      const placed = await readFile(join(dirs.finalDir, file.path));
      assert.ok(placed.equals(await readFile(join(source, file.path))));
      for (let piece = 0; piece < map.pieceCount; piece++)
        if (!store.has(piece)) await store.put(piece, await pieceBytes(piece));
      assert.equal(store.complete, true);
      // Complete: the partial files' folder is gone, the model is in place.
      assert.equal(await stat(dirs.dataDir).catch(() => undefined), undefined);
    } finally {
      await store.close();
    }
  });

  for (const hashThreads of [0, 2]) {
    const how = hashThreads === 0 ? 'on the main thread' : `on ${hashThreads} worker threads`;
    it(`keeps its verified pieces when reopened, and hashes them again after a reboot (${how})`, async () => {
      const dirs = storeDirs(`reopen-${hashThreads}`);
      const options = { dataDir: dirs.dataDir, stateDir: dirs.stateDir, hashThreads };
      const first = await PieceStore.open(map, options);
      for (const piece of [0, 2, 3]) await first.put(piece, await pieceBytes(piece));
      await first.close();
      const again = await PieceStore.open(map, options);
      assert.deepEqual(
        [0, 1, 2, 3].map((piece) => again.has(piece)),
        [true, false, true, true],
      );
      await again.close();
      // A reboot (another boot id in the state file) and a byte changed on disk behind our back:
      // the damaged piece no longer counts, the others do.
      const statePath = join(dirs.stateDir, 'store.json');
      const state = JSON.parse(await readFile(statePath, 'utf8')) as { model: string; boot: string };
      await writeFile(statePath, JSON.stringify({ ...state, boot: 'another-boot' }));
      const where = map.locate(2);
      const path = join(dirs.dataDir, where.file.path);
      const bytes = await readFile(path);
      bytes[where.offset + 5] = (bytes[where.offset + 5] ?? 0) ^ 1;
      await writeAt(path, bytes);
      const rebooted = await PieceStore.open(map, options);
      try {
        assert.deepEqual(
          [0, 1, 2, 3].map((piece) => rebooted.has(piece)),
          [true, false, false, true],
        );
      } finally {
        await rebooted.close();
      }
    });

    it(`adopts a file already at its final name only when every piece matches (${how})`, async () => {
      const dirs = storeDirs(`adopt-${hashThreads}`);
      const options = { ...dirs, hashThreads };
      // The model's largest file (several pieces).
      const index = manifest.files.reduce(
        (best, f, i, all) => (f.size > (all[best]?.size ?? 0) ? i : best),
        0,
      );
      const file = manifest.files[index];
      assert.ok(file !== undefined && file.pieces.length > 1);
      const original = await readFile(join(source, file.path));
      await writeAt(join(dirs.finalDir, file.path), original);
      const store = await PieceStore.open(map, options);
      try {
        for (let p = 0; p < file.pieces.length; p++) assert.equal(store.has(map.globalIndex(index, p)), true);
      } finally {
        await store.close();
      }
      // The same file with one byte of its last piece changed: refused, and left as it was.
      const changed = Buffer.from(original);
      changed[changed.length - 1] = (changed[changed.length - 1] ?? 0) ^ 1;
      const other = storeDirs(`adopt-changed-${hashThreads}`);
      await writeAt(join(other.finalDir, file.path), changed);
      await assert.rejects(PieceStore.open(map, { ...other, hashThreads }), {
        code: 'PULL_DESTINATION_CONFLICT',
      });
      assert.deepEqual(await readFile(join(other.finalDir, file.path)), changed);
    });
  }
});
