import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { open, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { buildManifest } from '../../src/manifest/build.js';
import { defaultPieceSize, manifestDigest, pieceRange } from '../../src/manifest/manifest.js';
import { merkleProof, verifyMerkleProof } from '../../src/manifest/merkle.js';
import { verifyDirectory } from '../../src/manifest/verify.js';
import { startFileServer } from '../../src/origin/file-server.js';
import { HttpOrigin } from '../../src/origin/http.js';
import { LocalOrigin } from '../../src/origin/local.js';
import { tempDir, writeSmallModel } from '../helpers/fixtures.js';

const PIECE = 64 * 1024;

test('the same bytes give the same digest: twice locally, with other thread counts, and over HTTP', async () => {
  const dir = await tempDir('build');
  try {
    await writeSmallModel(dir.path);
    const local = new LocalOrigin(dir.path);
    const first = await buildManifest(local, { pieceSize: PIECE, threads: 2 });
    const second = await buildManifest(local, { pieceSize: PIECE, threads: 1 });
    await local.close();
    assert.equal(manifestDigest(first), manifestDigest(second));
    const server = await startFileServer({ root: dir.path });
    try {
      const http = new HttpOrigin(server.url, {
        files: first.files.map((f) => ({ path: f.path, size: f.size })),
      });
      const remote = await buildManifest(http, { pieceSize: PIECE, concurrency: 3 });
      await http.close();
      assert.equal(manifestDigest(remote), manifestDigest(first));
    } finally {
      await server.close();
    }
  } finally {
    await dir.cleanup();
  }
});

test('piece digests are SHA-256 of the piece bytes, the whole-file digest matches sha256 of the file, and tensors are indexed', async () => {
  const dir = await tempDir('build-pieces');
  try {
    await writeSmallModel(dir.path);
    const local = new LocalOrigin(dir.path);
    const manifest = await buildManifest(local, { pieceSize: PIECE, fileSha256: true });
    await local.close();
    const shard = manifest.files.find((f) => f.path === 'model-00001-of-00002.safetensors');
    assert.ok(shard);
    const bytes = await readFile(join(dir.path, shard.path));
    assert.equal(shard.sha256, createHash('sha256').update(bytes).digest('hex'));
    shard.pieces.forEach((digest, i) => {
      const { start, end } = pieceRange(shard, PIECE, i);
      assert.equal(digest, createHash('sha256').update(bytes.subarray(start, end)).digest('hex'));
      assert.ok(verifyMerkleProof(digest, merkleProof(shard.pieces, i), shard.merkleRoot));
    });
    assert.deepEqual(
      shard.tensors?.map((t) => t.name),
      ['model.layers.1.input_layernorm.weight', 'model.layers.1.mlp.up_proj.weight'],
    );
    const empty = manifest.files.find((f) => f.path === 'sub/empty.txt');
    assert.deepEqual(empty?.pieces, []);
  } finally {
    await dir.cleanup();
  }
});

test('verify names the bad file and the bad pieces, and the missing file', async () => {
  const dir = await tempDir('verify');
  try {
    await writeSmallModel(dir.path);
    const local = new LocalOrigin(dir.path);
    const manifest = await buildManifest(local, { pieceSize: PIECE });
    await local.close();
    assert.equal((await verifyDirectory(dir.path, manifest)).ok, true);
    const handle = await open(join(dir.path, 'model-00001-of-00002.safetensors'), 'r+');
    await handle.write(Buffer.from([0xff, 0xfe]), 0, 2, 3 * PIECE + 5);
    await handle.close();
    const { rm } = await import('node:fs/promises');
    await rm(join(dir.path, 'config.json'));
    const report = await verifyDirectory(dir.path, manifest);
    assert.equal(report.ok, false);
    const byPath = new Map(report.files.map((f) => [f.path, f]));
    assert.equal(byPath.get('model-00001-of-00002.safetensors')?.verdict, 'corrupt');
    assert.deepEqual(byPath.get('model-00001-of-00002.safetensors')?.badPieces, [3]);
    assert.equal(byPath.get('config.json')?.verdict, 'missing');
    assert.equal(byPath.get('model-00002-of-00002.safetensors')?.verdict, 'ok');
  } finally {
    await dir.cleanup();
  }
});

test('the default piece size gives a model at least 512 pieces, in powers of two within 256 KiB..16 MiB', async () => {
  const KiB = 1024;
  const MiB = 1024 * KiB;
  assert.equal(defaultPieceSize(0), 256 * KiB);
  assert.equal(defaultPieceSize(64 * MiB), 256 * KiB, 'small models stop at 256 KiB');
  assert.equal(defaultPieceSize(256 * MiB), 512 * KiB);
  assert.equal(defaultPieceSize(256 * MiB - 1), 256 * KiB, 'just under: 512 KiB would give 511 pieces');
  assert.equal(defaultPieceSize(1024 * MiB), 2 * MiB);
  assert.equal(defaultPieceSize(8 * 1024 * MiB), 16 * MiB);
  assert.equal(defaultPieceSize(2 ** 40), 16 * MiB, 'large models keep 16 MiB pieces');
  // buildManifest without a piece size picks it from the model's total size.
  const dir = await tempDir('build-default');
  try {
    await writeSmallModel(dir.path);
    const local = new LocalOrigin(dir.path);
    const manifest = await buildManifest(local, { threads: 1 });
    await local.close();
    const total = manifest.files.reduce((sum, file) => sum + file.size, 0);
    assert.equal(manifest.pieceSize, defaultPieceSize(total));
  } finally {
    await dir.cleanup();
  }
});
