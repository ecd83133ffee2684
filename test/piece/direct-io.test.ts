/**
 * Direct I/O for piece bytes (src/piece/direct-io.ts): which buffers may go past the page cache, and
 * a store that writes them so: every aligned piece direct, a file's unaligned last piece buffered,
 * the files complete and correct, pieces read back either way; and a direct write the kernel refuses
 * (EINVAL), done buffered instead with every byte still right.
 */

import assert from 'node:assert/strict';
import { closeSync, constants, openSync, unlinkSync, writeSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { buildManifest } from '../../src/manifest/build.js';
import type { Manifest } from '../../src/manifest/manifest.js';
import { LocalOrigin } from '../../src/origin/local.js';
import {
  DIRECT_ALIGNMENT,
  O_DIRECT,
  carryAlignment,
  directEligible,
  directIoProbes,
  enableDirectIo,
  pieceBuffer,
} from '../../src/piece/direct-io.js';
import { nativeHelper } from '../../src/util/native-helper.js';
import { PieceMap } from '../../src/piece/piece-map.js';
import { PieceStore } from '../../src/piece/store.js';
import { sameFiles, tempDir, writeSmallModel } from '../helpers/fixtures.js';

const PIECE = 64 * 1024;

let work: { path: string; cleanup: () => Promise<void> };
let source: string;
let manifest: Manifest;
let map: PieceMap;
let direct = false;

before(async () => {
  work = await tempDir('direct-io');
  source = join(work.path, 'origin');
  await writeSmallModel(source);
  const origin = new LocalOrigin(source);
  manifest = await buildManifest(origin, { pieceSize: PIECE }).finally(() => origin.close());
  map = new PieceMap(manifest);
  direct = enableDirectIo(work.path);
  if (!direct) console.log('# direct I/O: this file system refuses O_DIRECT; only the buffered path runs');
});

after(async () => {
  await work.cleanup();
});

/**
 * A store with direct I/O under `root` (files finished into `root/final`), given every piece of the
 * model, each copied into `buffer` before its put. The caller closes it.
 */
async function storeAll(root: string, buffer: Buffer): Promise<PieceStore> {
  const store = await PieceStore.open(map, {
    dataDir: join(root, 'partial'),
    stateDir: join(root, 'state'),
    finalDir: join(root, 'final'),
    hashThreads: 0,
    directIo: true,
  });
  try {
    for (let piece = 0; piece < map.pieceCount; piece++) {
      const where = map.locate(piece);
      const original = await readFile(join(source, where.file.path));
      const bytes = buffer.subarray(0, where.length);
      bytes.set(original.subarray(where.offset, where.offset + where.length));
      assert.equal(await store.put(piece, bytes), 'stored');
    }
  } catch (error) {
    await store.close();
    throw error;
  }
  return store;
}

describe('direct I/O', () => {
  it('lets only aligned views of its own buffers go direct', (t) => {
    if (!direct) return t.skip('no O_DIRECT on this file system');
    const buffer = pieceBuffer(PIECE);
    assert.equal(buffer.length, PIECE);
    assert.equal(directEligible(buffer, 0), true);
    assert.equal(directEligible(buffer, 2 * PIECE), true);
    assert.equal(directEligible(buffer.subarray(DIRECT_ALIGNMENT), DIRECT_ALIGNMENT), true);
    // A misaligned file offset, start in memory or length goes buffered.
    assert.equal(directEligible(buffer, 512), false);
    assert.equal(directEligible(buffer.subarray(16), 0), false);
    assert.equal(directEligible(buffer.subarray(0, PIECE - 100), 0), false);
    assert.equal(directEligible(buffer.subarray(0, 0), 0), false);
    // Memory not made by pieceBuffer: its alignment is unknown.
    assert.equal(directEligible(Buffer.allocUnsafeSlow(PIECE), 0), false);
  });

  it('aligns buffers of every size, by their address when the native helper is built (no probe each)', (t) => {
    if (!direct) return t.skip('no O_DIRECT on this file system');
    const before = directIoProbes();
    const sizes = [PIECE, PIECE, 3 * PIECE, 512 * 1024, PIECE - 100, 4 * 1024 * 1024];
    const buffers = Array.from({ length: 40 }, (_, i) => pieceBuffer(sizes[i % sizes.length]!));
    for (const [index, buffer] of buffers.entries()) {
      assert.equal(buffer.length, sizes[index % sizes.length]);
      // A length that is not whole blocks goes buffered; its start is still aligned.
      assert.equal(directEligible(buffer.subarray(0, DIRECT_ALIGNMENT), 0), true, `buffer ${index}`);
    }
    if (nativeHelper()?.addressModulo === undefined) {
      console.log('# the native helper is not built: pieceBuffer probed each buffer');
      assert.ok(directIoProbes() >= before + buffers.length);
    } else {
      assert.equal(directIoProbes(), before, 'no buffer was probed');
    }
  });

  it('stores aligned pieces past the page cache and a file’s last piece buffered, all correct', async () => {
    const root = join(work.path, 'store');
    const store = await storeAll(root, pieceBuffer(PIECE));
    try {
      let aligned = 0;
      for (let piece = 0; piece < map.pieceCount; piece++) {
        const length = map.pieceLength(piece);
        if (length % DIRECT_ALIGNMENT === 0) aligned += length;
      }
      assert.ok(aligned > 0, 'the model has aligned pieces');
      assert.equal(store.directBytes, direct ? aligned : 0);
      assert.ok(
        await sameFiles(
          source,
          join(root, 'final'),
          manifest.files.map((file) => file.path),
        ),
      );
      // Read back into an aligned buffer (direct) and a plain one (buffered).
      for (let piece = 0; piece < map.pieceCount; piece++) {
        const where = map.locate(piece);
        const original = await readFile(join(source, where.file.path));
        const expected = original.subarray(where.offset, where.offset + where.length);
        const intoAligned = pieceBuffer(PIECE);
        const intoPlain = Buffer.alloc(PIECE);
        assert.equal(await store.read(piece, intoAligned), where.length);
        await store.read(piece, intoPlain);
        assert.ok(intoAligned.subarray(0, where.length).equals(expected), `piece ${piece} read direct`);
        assert.ok(intoPlain.subarray(0, where.length).equals(expected), `piece ${piece} read buffered`);
      }
    } finally {
      await store.close();
    }
  });
});

describe('a direct transfer the kernel refuses', () => {
  it('is done buffered, the file goes on buffered, and every byte is right', async (t) => {
    if (!direct || O_DIRECT === undefined) return t.skip('no O_DIRECT on this file system');
    // Fault injection: memory whose alignment the process misjudges. A plain buffer is given the
    // aligned start of one made by pieceBuffer, and only one whose view there the kernel refuses
    // (tried on a probe file with O_DIRECT) is used.
    const donor = pieceBuffer(PIECE);
    const probePath = join(work.path, 'refusal-probe');
    const fd = openSync(probePath, constants.O_RDWR | constants.O_CREAT | O_DIRECT, 0o600);
    let misjudged: Buffer | undefined;
    try {
      for (let i = 0; i < 64 && misjudged === undefined; i++) {
        const plain = Buffer.allocUnsafeSlow(PIECE + DIRECT_ALIGNMENT + 16 * i);
        try {
          writeSync(fd, plain, donor.byteOffset, DIRECT_ALIGNMENT, 0);
        } catch {
          carryAlignment(donor.buffer, plain.buffer);
          misjudged = plain.subarray(donor.byteOffset, donor.byteOffset + PIECE);
        }
      }
    } finally {
      closeSync(fd);
      unlinkSync(probePath);
    }
    if (misjudged === undefined) return t.skip('the kernel took every buffer tried');
    assert.equal(directEligible(misjudged, 0), true, 'eligible as far as the process can tell');
    const root = join(work.path, 'refused');
    const store = await storeAll(root, misjudged);
    assert.equal(store.directBytes, 0);
    await store.close();
    assert.ok(
      await sameFiles(
        source,
        join(root, 'final'),
        manifest.files.map((file) => file.path),
      ),
    );
  });
});
