/**
 * Plan manifests: written deterministically, read back through zod and cross-checks, and every way of
 * tampering with one (or with the bytes it describes) fails with its own typed error.
 */

import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { isWeightcastError, type ErrorCode } from '../../../src/errors.js';
import { buildParallelPlan } from '../../../src/loader/plan/build.js';
import {
  buildPlanManifest,
  readModelDirectory,
  readPlanManifest,
  readRankTensor,
  writePlanManifest,
  type ModelDirectory,
} from '../../../src/loader/plan/files.js';
import {
  checkSliceBytes,
  encodePlanManifest,
  parsePlanManifest,
  planManifestDigest,
} from '../../../src/loader/plan/plan-manifest.js';
import { tempDir } from '../../helpers/fixtures.js';
import { llamaLike, writeTinyModel } from './helpers.js';

let root: { path: string; cleanup: () => Promise<void> };
let source: ModelDirectory;

before(async () => {
  root = await tempDir('plan-manifest');
  await writeTinyModel(
    join(root.path, 'model'),
    llamaLike({
      modelType: 'qwen2',
      layers: 2,
      hidden: 64,
      heads: 4,
      kvHeads: 2,
      headDim: 16,
      intermediate: 128,
      vocab: 150,
      bias: true,
    }),
  );
  source = await readModelDirectory(join(root.path, 'model'));
});

after(async () => {
  await root.cleanup();
});

const rejects = (code: ErrorCode) => (error: unknown) => isWeightcastError(error, code);

test('a plan manifest round-trips exactly and its digest is the SHA-256 of the file', async () => {
  const plan = buildParallelPlan(source, { tp: 4, pp: 2 });
  const manifest = await buildPlanManifest(source, plan);
  const path = join(root.path, 'plan.json');
  const digest = await writePlanManifest(path, manifest);
  assert.equal(digest, planManifestDigest(manifest));
  const again = await readPlanManifest(path, { expectedDigest: digest });
  assert.deepEqual(again, manifest);
  assert.ok(encodePlanManifest(again).equals(await readFile(path)));
  // Deterministic: the same plan hashed again gives the same bytes.
  assert.ok(encodePlanManifest(await buildPlanManifest(source, plan)).equals(await readFile(path)));
  assert.equal(manifest.ranks.length, 8);
  const vocab = manifest.ranks[0]?.tensors.find((tensor) => tensor.name === 'model.embed_tokens.weight');
  // 150 rows pad to 192: 48 per rank.
  assert.deepEqual(vocab?.slice, { dim: 0, start: 0, length: 48, padded: 48 });
  // A rank verifies exactly the bytes it fetched through its ranges.
  const rank = plan.ranks[5];
  assert.ok(rank);
  for (const held of rank.tensors) {
    const entry = manifest.ranks[5]?.tensors.find((tensor) => tensor.name === held.name);
    assert.ok(entry);
    checkSliceBytes(entry, await readRankTensor(source.dir, held));
  }
});

test('tampered manifests and tampered bytes are rejected with typed errors', async () => {
  const plan = buildParallelPlan(source, { tp: 2 });
  const manifest = await buildPlanManifest(source, plan);
  const path = join(root.path, 'tampered.json');
  const digest = await writePlanManifest(path, manifest);
  const text = encodePlanManifest(manifest).toString('utf8');
  const document = JSON.parse(text) as {
    ranks: Array<{
      tensors: Array<{
        name: string;
        slice: { start: number; length: number } | null;
        sha256: string;
        bytes: number;
      }>;
    }>;
    files: Array<{ path: string }>;
    tp: number;
  };
  const sliced = document.ranks[1]?.tensors.find((tensor) => tensor.slice !== null);
  assert.ok(sliced?.slice);

  // One changed digest: the file no longer has the digest it was named by.
  const changedHash = text.replace(
    sliced.sha256,
    sliced.sha256.replace(/^./, (c) => (c === 'a' ? 'b' : 'a')),
  );
  await writeFile(path, changedHash);
  await assert.rejects(
    readPlanManifest(path, { expectedDigest: digest }),
    rejects('PLAN_MANIFEST_DIGEST_MISMATCH'),
  );
  // Read without the digest, it parses, but the slice's bytes then fail verification.
  const forged = await readPlanManifest(path);
  const forgedEntry = forged.ranks[1]?.tensors.find((tensor) => tensor.name === sliced.name);
  const real = plan.ranks[1]?.tensors.find((tensor) => tensor.name === sliced.name);
  assert.ok(forgedEntry && real);
  const bytes = await readRankTensor(source.dir, real);
  assert.throws(() => checkSliceBytes(forgedEntry, bytes), rejects('PLAN_SLICE_HASH_MISMATCH'));
  // The honest manifest catches a corrupted byte of the slice.
  const honest = manifest.ranks[1]?.tensors.find((tensor) => tensor.name === sliced.name);
  assert.ok(honest);
  bytes[0] = (bytes[0] ?? 0) ^ 0xff;
  assert.throws(() => checkSliceBytes(honest, bytes), rejects('PLAN_SLICE_HASH_MISMATCH'));

  const mutate = (change: (copy: typeof document) => void): string => {
    const copy = JSON.parse(text) as typeof document;
    change(copy);
    return JSON.stringify(copy);
  };
  const broken = [
    'not json',
    mutate((copy) => {
      const target = copy.ranks[1]?.tensors.find((tensor) => tensor.name === sliced.name);
      if (target?.slice) target.slice.start += 1_000_000;
    }),
    mutate((copy) => {
      const target = copy.ranks[0]?.tensors[0];
      if (target) target.bytes += 2;
    }),
    mutate((copy) => {
      copy.tp = 3;
    }),
    mutate((copy) => {
      const file = copy.files[0];
      if (file) file.path = '../escape.safetensors';
    }),
    mutate((copy) => {
      const first = copy.ranks[0]?.tensors[0];
      if (first) copy.ranks[0]?.tensors.push(first);
    }),
    mutate((copy) => {
      (copy as unknown as Record<string, unknown>)['extra'] = true;
    }),
    mutate((copy) => {
      const target = copy.ranks[0]?.tensors[0];
      if (target) target.sha256 = 'XYZ';
    }),
  ];
  for (const [index, variant] of broken.entries()) {
    assert.throws(
      () => parsePlanManifest(variant, `variant ${index}`),
      rejects('PLAN_MANIFEST_INVALID'),
      `variant ${index}`,
    );
  }
  await assert.rejects(readPlanManifest(join(root.path, 'missing.json')), rejects('IO'));
});
