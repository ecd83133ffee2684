/**
 * The piece layer's contract, for every way a piece enters the store (bytes hashed inline, bytes with
 * a digest from a hash worker, a copy made by a hash worker): only verified bytes are written and
 * counted; a file is under its final name only when complete; after a kill -9 the store reopens with
 * every piece it acknowledged, so none is fetched again. Then what the pull relies on: digests
 * learnt without a manifest, state of another identity discarded, a wrong final file replaced.
 */

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { cp, readFile, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, it } from 'node:test';
import { WeightcastError } from '../../src/errors.js';
import { buildManifest } from '../../src/manifest/build.js';
import { HashPool } from '../../src/manifest/hash-pool.js';
import type { Manifest } from '../../src/manifest/manifest.js';
import { LocalOrigin } from '../../src/origin/local.js';
import { PieceMap } from '../../src/piece/piece-map.js';
import { PieceStore, type PieceStoreOptions } from '../../src/piece/store.js';
import { DIRECT_ALIGNMENT, enableDirectIo } from '../../src/piece/direct-io.js';
import { nativeHelper } from '../../src/util/native-helper.js';
import { sameFiles, tempDir, writeAt, writeSmallModel } from '../helpers/fixtures.js';
import { storePiece, type StoreWay, type StoreWriterJob } from '../helpers/store-writer.js';

const WRITER = fileURLToPath(new URL('../helpers/store-writer.js', import.meta.url));

let work: { path: string; cleanup: () => Promise<void> };
let source: string;
/** The source with one byte changed in every piece. */
let corrupt: string;
let manifest: Manifest;
let map: PieceMap;
let pool: HashPool;

before(async () => {
  work = await tempDir('piece-contract');
  source = join(work.path, 'origin');
  await writeSmallModel(source);
  const origin = new LocalOrigin(source);
  manifest = await buildManifest(origin, { pieceSize: 64 * 1024 }).finally(() => origin.close());
  map = new PieceMap(manifest);
  corrupt = join(work.path, 'corrupt');
  await cp(source, corrupt, { recursive: true });
  for (const file of manifest.files) {
    if (file.size === 0) continue;
    const bytes = await readFile(join(corrupt, file.path));
    for (let offset = 0; offset < bytes.length; offset += manifest.pieceSize) {
      const at = Math.min(offset + 7, bytes.length - 1);
      bytes[at] = (bytes[at] ?? 0) ^ 0x5a;
    }
    await writeFile(join(corrupt, file.path), bytes);
  }
  pool = new HashPool(2);
});

after(async () => {
  await pool.close();
  await work.cleanup();
});

function dirs(name: string): { dataDir: string; stateDir: string; finalDir: string } {
  const root = join(work.path, name);
  return { dataDir: join(root, 'partial'), stateDir: join(root, 'state'), finalDir: join(root, 'final') };
}

/** The model's largest file (several pieces) and its global pieces. */
function largestFile(): { index: number; path: string; pieces: number[] } {
  const index = manifest.files.reduce((best, f, i, all) => (f.size > (all[best]?.size ?? 0) ? i : best), 0);
  const file = manifest.files[index];
  assert.ok(file !== undefined && file.pieces.length > 2);
  return { index, path: file.path, pieces: file.pieces.map((_, p) => map.globalIndex(index, p)) };
}

async function completeFrom(store: PieceStore, way: StoreWay): Promise<number> {
  let stored = 0;
  for (let piece = 0; piece < map.pieceCount; piece++) {
    if (store.has(piece)) continue;
    assert.equal(await storePiece(store, pool, source, piece, way), 'stored');
    stored++;
  }
  return stored;
}

/** Lines the child printed, once `count` of them arrived. */
function firstLines(child: ReturnType<typeof spawn>, count: number): Promise<number[]> {
  return new Promise((resolve, reject) => {
    let text = '';
    child.stdout?.on('data', (chunk: Buffer) => {
      text += chunk.toString();
      const lines = text.split('\n').filter((line) => line.length > 0);
      if (lines.length >= count) resolve(lines.map(Number));
    });
    child.once('exit', (code) => reject(new Error(`the writer exited (${code}) early: ${text}`)));
  });
}

/**
 * Every way a piece enters the store; `inlineWrites`: written on the event loop (write-policy.ts);
 * `directIo`: a store with direct I/O (`direct` always has it; `copy` with it writes from the hash
 * worker past the page cache).
 */
const CASES: Array<{ way: StoreWay; inlineWrites: boolean; directIo?: boolean }> = [
  { way: 'inline', inlineWrites: false },
  { way: 'digest', inlineWrites: false },
  { way: 'copy', inlineWrites: false },
  { way: 'copy', inlineWrites: false, directIo: true },
  { way: 'direct', inlineWrites: false },
  { way: 'inline', inlineWrites: true },
  { way: 'direct', inlineWrites: true },
];

for (const { way, inlineWrites, directIo } of CASES) {
  const name = `${way}${directIo === true && way !== 'direct' ? '-direct' : ''}${inlineWrites ? '-written-on-the-loop' : ''}`;
  /** A store's folders for one test of this case, and its options (JSON, for the writer process). */
  const setUp = (test: string): { at: ReturnType<typeof dirs>; options: PieceStoreOptions } => {
    const at = dirs(`${test}-${name}`);
    const direct = way === 'direct' || directIo === true;
    return { at, options: { ...at, hashThreads: 0, directIo: direct, inlineWrites } };
  };
  const title = `${way}${directIo === true && way !== 'direct' ? ' with direct I/O' : ''}${inlineWrites ? ', written on the event loop' : ''}`;
  describe(`the piece layer, pieces stored ${title}`, () => {
    it('writes and counts only verified bytes', async () => {
      const { options } = setUp('verified');
      // An idle loop: every small piece is written on it.
      const store = await PieceStore.open(map, { ...options, loopBusy: () => 0 });
      try {
        const { index, path, pieces } = largestFile();
        const piece = pieces[1] as number;
        assert.equal(await storePiece(store, pool, corrupt, piece, way), 'corrupt');
        assert.equal(store.has(piece), false);
        assert.equal(store.heldCount, 0);
        const where = map.locate(piece);
        const onDisk = await readFile(store.pathOf(index));
        assert.ok(onDisk.subarray(where.offset, where.offset + where.length).every((byte) => byte === 0));
        assert.equal(await storePiece(store, pool, source, piece, way), 'stored');
        assert.equal(await storePiece(store, pool, source, piece, way), 'duplicate');
        const back = Buffer.alloc(where.length);
        await store.read(piece, back);
        const original = await readFile(join(source, path));
        assert.ok(back.equals(original.subarray(where.offset, where.offset + where.length)));
        assert.equal(store.inlineBytes, inlineWrites ? where.length : 0);
        if (way === 'copy' && directIo === true) {
          // The worker aligns its buffer by its address (the native helper) and the file system must
          // take O_DIRECT: then the piece, whole blocks only, went past the page cache.
          if (nativeHelper()?.addressModulo !== undefined && enableDirectIo(options.dataDir)) {
            assert.equal(where.length % DIRECT_ALIGNMENT, 0);
            assert.equal(store.directBytes, where.length);
          } else {
            console.log(
              '# direct copies not checked: no native helper here, or no O_DIRECT on this file system',
            );
          }
        }
      } finally {
        await store.close();
      }
    });

    it('puts a file under its final name only when every piece of it is verified', async () => {
      const { at, options } = setUp('final');
      const store = await PieceStore.open(map, options);
      try {
        const { path, pieces } = largestFile();
        for (const piece of pieces.slice(0, -1)) await storePiece(store, pool, source, piece, way);
        // The last piece arrives wrong first: still not in place.
        assert.equal(await storePiece(store, pool, corrupt, pieces.at(-1) as number, way), 'corrupt');
        assert.equal(await stat(join(at.finalDir, path)).catch(() => undefined), undefined);
        await storePiece(store, pool, source, pieces.at(-1) as number, way);
        assert.ok(await sameFiles(source, at.finalDir, [path]));
      } finally {
        await store.close();
      }
    });

    it('after a kill -9 reopens with every piece it acknowledged, and fetches none of them again', async () => {
      const { at, options } = setUp('killed');
      const jobPath = join(work.path, `killed-${name}.json`);
      const job: StoreWriterJob = { manifest, source, options, way, count: map.pieceCount - 1 };
      await writeFile(jobPath, JSON.stringify(job));
      const child = spawn(process.execPath, [WRITER, jobPath], { stdio: ['ignore', 'pipe', 'inherit'] });
      const exited = new Promise((resolve) => child.once('exit', resolve));
      const acknowledged = await firstLines(child, 5);
      child.kill('SIGKILL');
      await exited;
      const store = await PieceStore.open(map, options);
      try {
        for (const piece of acknowledged) assert.equal(store.has(piece), true, `piece ${piece} held`);
        const held = store.heldCount;
        // Whatever is under a final name is complete already.
        for (const file of manifest.files) {
          if ((await stat(join(at.finalDir, file.path)).catch(() => undefined)) !== undefined)
            assert.ok(await sameFiles(source, at.finalDir, [file.path]), file.path);
        }
        assert.equal(await completeFrom(store, way), map.pieceCount - held);
        assert.ok(
          await sameFiles(
            source,
            at.finalDir,
            manifest.files.map((file) => file.path),
          ),
        );
      } finally {
        await store.close();
      }
    });
  });
}

/** The manifest as a pull without one sees it: files and sizes, no digests. */
function withoutDigests(): Manifest {
  return {
    pieceSize: manifest.pieceSize,
    files: manifest.files.map((file) => ({ ...file, merkleRoot: '', pieces: file.pieces.map(() => '') })),
  };
}

describe('the piece store for a pull', () => {
  for (const way of ['digest', 'copy'] as const) {
    it(`learns digests without a manifest, with the journal as the reference on resume (${way})`, async () => {
      const at = dirs(`learn-${way}`);
      const unknown = new PieceMap(withoutDigests());
      const options: PieceStoreOptions = { ...at, learnDigests: true, identity: 'trust', hashThreads: 0 };
      const first = await PieceStore.open(unknown, options);
      const { pieces } = largestFile();
      for (const piece of pieces) {
        assert.equal(first.digestOf(piece), undefined);
        // Learning accepts any bytes of the right length (the trusted origin's), no others.
        if (way === 'digest')
          assert.equal(await first.put(piece, new Uint8Array(3), { digest: 'x' }), 'corrupt');
        assert.equal(await storePiece(first, pool, source, piece, way), 'stored');
        assert.equal(first.digestOf(piece), map.locate(piece).digest);
      }
      await first.close();
      // A reboot, and a byte of the file changed at its final name behind the store's back.
      const statePath = join(at.stateDir, 'store.json');
      const state = JSON.parse(await readFile(statePath, 'utf8')) as { model: string; boot: string };
      await writeFile(statePath, JSON.stringify({ ...state, boot: 'another-boot' }));
      const where = map.locate(pieces[0] as number);
      const finalPath = join(at.finalDir, where.file.path);
      const bytes = await readFile(finalPath);
      bytes[where.offset + 1] = (bytes[where.offset + 1] ?? 0) ^ 1;
      await writeAt(finalPath, bytes);
      const again = await PieceStore.open(unknown, { ...options, replaceMismatchedFinals: true });
      try {
        // The file no longer matches its journalled digests: all of it is fetched again.
        assert.equal(again.has(pieces[0] as number), false);
        assert.equal(again.digestOf(pieces[0] as number), undefined);
        assert.equal(await completeFrom(again, way), map.pieceCount);
        assert.ok(
          await sameFiles(
            source,
            at.finalDir,
            manifest.files.map((file) => file.path),
          ),
        );
        for (let piece = 0; piece < map.pieceCount; piece++)
          assert.equal(again.digestOf(piece), map.locate(piece).digest);
      } finally {
        await again.close();
      }
    });
  }

  it('keeps learnt pieces of unfinished files across a reopen in one boot', async () => {
    const at = dirs('learn-reopen');
    const unknown = new PieceMap(withoutDigests());
    const options: PieceStoreOptions = { ...at, learnDigests: true, identity: 'trust', hashThreads: 0 };
    const first = await PieceStore.open(unknown, options);
    const { pieces } = largestFile();
    for (const piece of pieces.slice(0, 2)) await storePiece(first, pool, source, piece, 'inline');
    await first.close();
    const again = await PieceStore.open(unknown, options);
    try {
      assert.deepEqual(
        pieces.slice(0, 3).map((piece) => again.digestOf(piece)),
        [map.locate(pieces[0] as number).digest, map.locate(pieces[1] as number).digest, undefined],
      );
      assert.equal(again.heldCount, 2);
    } finally {
      await again.close();
    }
  });

  it('discards the state of another identity, partial files too, and says so', async () => {
    const at = dirs('identity');
    const first = await PieceStore.open(map, { ...at, identity: 'one', hashThreads: 0 });
    assert.equal(first.stateDiscarded, false);
    const { pieces } = largestFile();
    await storePiece(first, pool, source, pieces[0] as number, 'inline');
    await first.close();
    const same = await PieceStore.open(map, { ...at, identity: 'one', hashThreads: 0 });
    assert.equal(same.stateDiscarded, false);
    assert.equal(same.heldCount, 1);
    await same.close();
    const other = await PieceStore.open(map, { ...at, identity: 'two', hashThreads: 0 });
    try {
      assert.equal(other.stateDiscarded, true);
      assert.equal(other.heldCount, 0);
      const where = map.locate(pieces[0] as number);
      const onDisk = await readFile(other.pathOf(where.fileIndex));
      assert.ok(
        onDisk.every((byte) => byte === 0),
        'the old partial file is gone',
      );
    } finally {
      await other.close();
    }
  });

  it('replaces a wrong file at its final name on request, only once the verified copy is complete', async () => {
    const at = dirs('replace');
    const { index, path, pieces } = largestFile();
    const changed = await readFile(join(corrupt, path));
    await writeAt(join(at.finalDir, path), changed);
    const events: number[] = [];
    const store = await PieceStore.open(map, {
      ...at,
      replaceMismatchedFinals: true,
      hashThreads: 0,
      onFileFinished: (file) => events.push(file),
    });
    try {
      assert.equal(store.has(pieces[0] as number), false);
      for (const piece of pieces.slice(0, -1)) await storePiece(store, pool, source, piece, 'copy');
      assert.deepEqual(await readFile(join(at.finalDir, path)), changed);
      await storePiece(store, pool, source, pieces.at(-1) as number, 'copy');
      assert.ok(await sameFiles(source, at.finalDir, [path]));
      assert.ok(events.includes(index));
    } finally {
      await store.close();
    }
  });

  it('finishes no file while a manifest check is under way, and fails the piece that would with its error', async () => {
    const { path, pieces } = largestFile();
    for (const outcome of ['passes', 'fails'] as const) {
      const at = dirs(`manifest-check-${outcome}`);
      let settle: (error?: Error) => void = () => undefined;
      const manifestCheck = new Promise<void>((resolve, reject) => {
        settle = (error) => (error === undefined ? resolve() : reject(error));
      });
      manifestCheck.catch(() => undefined);
      const store = await PieceStore.open(map, { ...at, hashThreads: 0, manifestCheck });
      try {
        for (const piece of pieces.slice(0, -1)) await storePiece(store, pool, source, piece, 'inline');
        const last = storePiece(store, pool, source, pieces.at(-1) as number, 'inline');
        last.catch(() => undefined);
        await new Promise((resolve) => setTimeout(resolve, 50));
        assert.equal(
          await stat(join(at.finalDir, path)).catch(() => undefined),
          undefined,
          'not finished early',
        );
        if (outcome === 'passes') {
          settle();
          assert.equal(await last, 'stored');
          assert.ok(await sameFiles(source, at.finalDir, [path]));
        } else {
          const wrong = new WeightcastError('MANIFEST_DIGEST_MISMATCH', 'a root does not match');
          settle(wrong);
          await assert.rejects(last, (error) => error === wrong);
          assert.equal(await stat(join(at.finalDir, path)).catch(() => undefined), undefined);
        }
      } finally {
        await store.close();
      }
    }
  });
});
