import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { mkdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import type { Manifest } from '../../src/manifest/manifest.js';
import { merkleRoot } from '../../src/manifest/merkle.js';
import { PieceStore } from '../../src/piece/store.js';
import { PieceMap } from '../../src/piece/piece-map.js';
import { decodeBitfield, encodeBitfield } from '../../src/swarm/wire/protocol.js';
import { deterministicBytes, tempDir } from '../helpers/fixtures.js';

const PIECE = 64 * 1024;

function manifestOf(files: Array<{ path: string; bytes: Buffer }>): Manifest {
  return {
    pieceSize: PIECE,
    files: files.map(({ path, bytes }) => {
      const pieces: string[] = [];
      for (let offset = 0; offset < bytes.length; offset += PIECE) {
        pieces.push(
          createHash('sha256')
            .update(bytes.subarray(offset, offset + PIECE))
            .digest('hex'),
        );
      }
      return { path, size: bytes.length, merkleRoot: merkleRoot(pieces), pieces };
    }),
  };
}

const a = deterministicBytes('a', PIECE * 2 + 100);
const empty = Buffer.alloc(0);
const b = deterministicBytes('b', PIECE);
const files = [
  { path: 'a.bin', bytes: a },
  { path: 'b.empty', bytes: empty },
  { path: 'c/b.bin', bytes: b },
];

function pieceBytes(map: PieceMap, global: number): Buffer {
  const where = map.locate(global);
  const source = files[where.fileIndex]!.bytes;
  return source.subarray(where.offset, where.offset + where.length);
}

describe('PieceMap', () => {
  it('numbers pieces across files, skipping empty ones', () => {
    const map = new PieceMap(manifestOf(files));
    assert.equal(map.pieceCount, 4);
    assert.equal(map.totalBytes, a.length + b.length);
    assert.deepEqual(
      [0, 1, 2, 3].map((g) => {
        const where = map.locate(g);
        return [where.file.path, where.piece, where.offset, where.length];
      }),
      [
        ['a.bin', 0, 0, PIECE],
        ['a.bin', 1, PIECE, PIECE],
        ['a.bin', 2, 2 * PIECE, 100],
        ['c/b.bin', 0, 0, PIECE],
      ],
    );
    assert.throws(() => map.locate(4), RangeError);
    assert.deepEqual(map.piecesOfRange(0, PIECE - 1, PIECE + 1), [0, 1]);
    assert.deepEqual(map.piecesOfRange(2, 0, PIECE), [3]);
    assert.deepEqual(map.piecesOfRange(1, 0, 0), []);
  });
});

describe('bitfields on the wire', () => {
  it('round-trip and refuse the wrong size or bits past the end', () => {
    const held = new Set([0, 3, 8, 9]);
    const encoded = encodeBitfield(10, (p) => held.has(p));
    assert.deepEqual(decodeBitfield(encoded, 10), [0, 3, 8, 9]);
    assert.throws(() => decodeBitfield(encoded, 20), { code: 'SWARM_PROTOCOL' });
    assert.throws(() => decodeBitfield(Buffer.from([0, 0x80]).toString('base64'), 10), {
      code: 'SWARM_PROTOCOL',
    });
  });
});

describe('PieceStore', () => {
  it('stores only verified bytes, counts a piece once, and resumes from its journal', async () => {
    const dir = await tempDir('store');
    try {
      const map = new PieceMap(manifestOf(files));
      const options = { dataDir: join(dir.path, 'data'), stateDir: join(dir.path, 'state') };
      const store = await PieceStore.open(map, options);
      const wrong = Buffer.from(pieceBytes(map, 1));
      wrong[7] = (wrong[7] ?? 0) ^ 1;
      assert.equal(await store.put(1, wrong), 'corrupt');
      assert.equal(store.has(1), false);
      // Corrupt bytes never reach the disk: the file is still sparse zeros there.
      const onDisk = await readFile(join(options.dataDir, 'a.bin'));
      assert.ok(onDisk.subarray(PIECE, 2 * PIECE).every((byte) => byte === 0));
      // Two copies of the same piece arriving together count once.
      const results = await Promise.all([store.put(0, pieceBytes(map, 0)), store.put(0, pieceBytes(map, 0))]);
      assert.deepEqual([...results].sort(), ['duplicate', 'stored']);
      assert.equal(store.heldCount, 1);
      assert.equal(await store.put(3, pieceBytes(map, 3)), 'stored');
      await store.close();

      const again = await PieceStore.open(map, options);
      assert.equal(again.heldCount, 2);
      assert.ok(again.has(0) && again.has(3) && !again.has(1));
      const target = Buffer.alloc(PIECE);
      assert.equal(await again.read(3, target), PIECE);
      assert.deepEqual(target, b);
      await assert.rejects(again.read(1, target), { code: 'SWARM_PIECE_NOT_HELD' });
      await again.close();
    } finally {
      await dir.cleanup();
    }
  });

  it('moves each completed file to its final name and keeps serving it', async () => {
    const dir = await tempDir('store-final');
    try {
      const map = new PieceMap(manifestOf(files));
      const final = join(dir.path, 'dest');
      const store = await PieceStore.open(map, {
        dataDir: join(dir.path, 'partial'),
        stateDir: join(dir.path, 'state'),
        finalDir: final,
      });
      // The empty file is complete from the start.
      assert.equal((await stat(join(final, 'b.empty'))).size, 0);
      await store.put(3, pieceBytes(map, 3));
      assert.deepEqual(await readFile(join(final, 'c/b.bin')), b);
      for (const piece of [0, 1]) await store.put(piece, pieceBytes(map, piece));
      await assert.rejects(stat(join(final, 'a.bin')));
      const waiting = store.whenHeld(2);
      await store.put(2, pieceBytes(map, 2));
      await waiting;
      assert.deepEqual(await readFile(join(final, 'a.bin')), a);
      const target = Buffer.alloc(100);
      await store.read(2, target);
      assert.deepEqual(target, a.subarray(2 * PIECE));
      assert.ok(store.complete);
      await store.close();
    } finally {
      await dir.cleanup();
    }
  });

  it('refuses to open when one of its files cannot be opened, and opens once that is fixed', async () => {
    const dir = await tempDir('store-blocked');
    try {
      const map = new PieceMap(manifestOf(files));
      const options = { dataDir: join(dir.path, 'data'), stateDir: join(dir.path, 'state') };
      // A directory where the file c/b.bin belongs: that file's open fails, the others succeed.
      await mkdir(join(options.dataDir, 'c', 'b.bin'), { recursive: true });
      await assert.rejects(PieceStore.open(map, options), { code: 'EISDIR' });
      await rm(join(options.dataDir, 'c', 'b.bin'), { recursive: true });
      const store = await PieceStore.open(map, options);
      assert.equal(await store.put(3, pieceBytes(map, 3)), 'stored');
      await store.close();
    } finally {
      await dir.cleanup();
    }
  });

  it('forgets the journal of another model', async () => {
    const dir = await tempDir('store-other');
    try {
      const options = { dataDir: join(dir.path, 'data'), stateDir: join(dir.path, 'state') };
      const first = new PieceMap(manifestOf(files));
      const store = await PieceStore.open(first, options);
      await store.put(0, pieceBytes(first, 0));
      await store.close();
      const other = new PieceMap(manifestOf([{ path: 'a.bin', bytes: deterministicBytes('other', PIECE) }]));
      await writeFile(join(options.dataDir, 'a.bin'), Buffer.alloc(0));
      const reopened = await PieceStore.open(other, options);
      assert.equal(reopened.heldCount, 0);
      await reopened.close();
    } finally {
      await dir.cleanup();
    }
  });
});
