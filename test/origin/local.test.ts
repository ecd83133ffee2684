import { test } from 'node:test';
import assert from 'node:assert/strict';
import { symlink } from 'node:fs/promises';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { isWeightcastError } from '../../src/errors.js';
import { LocalOrigin } from '../../src/origin/local.js';
import { fileBytes, makeTempModel, rejection } from './helpers.js';

const spec = {
  'model-00001-of-00002.safetensors': 70_000,
  'model-00002-of-00002.safetensors': 33_333,
  'config.json': '{"model_type":"test"}',
  'sub/dir/extra.bin': 10,
  '.weightcast/state.json': '{}',
  '.cache/blob': 5,
  'sub/.hidden': 3,
  'empty.bin': 0,
};

test('LocalOrigin lists files recursively, sorted, skipping dot-entries', async () => {
  const model = await makeTempModel(spec);
  const origin = new LocalOrigin(model.dir);
  try {
    assert.deepEqual(await origin.list(), [
      { path: 'config.json', size: 21 },
      { path: 'empty.bin', size: 0 },
      { path: 'model-00001-of-00002.safetensors', size: 70_000 },
      { path: 'model-00002-of-00002.safetensors', size: 33_333 },
      { path: 'sub/dir/extra.bin', size: 10 },
    ]);
  } finally {
    await origin.close();
    await model.remove();
  }
});

test('LocalOrigin follows symlinks to files and accepts file:// URLs', async () => {
  const model = await makeTempModel({ 'blobs/abc': 100, 'snapshot/config.json': '{}' });
  await symlink(join(model.dir, 'blobs/abc'), join(model.dir, 'snapshot/model.safetensors'));
  await symlink(join(model.dir, 'blobs'), join(model.dir, 'snapshot/linked-dir'));
  const origin = new LocalOrigin(pathToFileURL(join(model.dir, 'snapshot')).href);
  try {
    assert.deepEqual(await origin.list(), [
      { path: 'config.json', size: 2 },
      { path: 'model.safetensors', size: 100 },
    ]);
    const target = new Uint8Array(100);
    await origin.readInto('model.safetensors', 0, target);
    assert.deepEqual(Buffer.from(target), fileBytes(model, 'blobs/abc'));
  } finally {
    await origin.close();
    await model.remove();
  }
});

test('LocalOrigin reads exact ranges and counts them', async () => {
  const model = await makeTempModel(spec);
  const origin = new LocalOrigin(model.dir);
  const path = 'model-00001-of-00002.safetensors';
  const expected = fileBytes(model, path);
  try {
    for (const [offset, length] of [
      [0, 1],
      [0, 70_000],
      [12_345, 20_000],
      [69_999, 1],
      [500, 0],
    ] as const) {
      const target = new Uint8Array(length);
      await origin.readInto(path, offset, target);
      assert.deepEqual(Buffer.from(target), expected.subarray(offset, offset + length));
    }
    assert.equal(origin.stats.bytesRead, 1 + 70_000 + 20_000 + 1);
    assert.deepEqual(await origin.stat(path), { path, size: 70_000 });
  } finally {
    await origin.close();
    await model.remove();
  }
});

test('LocalOrigin reuses a bounded set of file handles', async () => {
  const model = await makeTempModel(spec);
  const origin = new LocalOrigin(model.dir, { openFilesMax: 1 });
  const paths = ['model-00001-of-00002.safetensors', 'model-00002-of-00002.safetensors', 'config.json'];
  try {
    const reads = [];
    for (let round = 0; round < 3; round++) {
      for (const path of paths) {
        const target = new Uint8Array(8);
        reads.push(origin.readInto(path, 3, target).then(() => [path, target] as const));
      }
    }
    for (const [path, target] of await Promise.all(reads)) {
      assert.deepEqual(Buffer.from(target), fileBytes(model, path).subarray(3, 11));
    }
  } finally {
    await origin.close();
    await model.remove();
  }
});

test('LocalOrigin reports short reads and missing files with typed errors', async () => {
  const model = await makeTempModel(spec);
  const origin = new LocalOrigin(model.dir);
  try {
    const short = await rejection(origin.readInto('config.json', 10, new Uint8Array(100)));
    assert.ok(isWeightcastError(short, 'ORIGIN_SHORT_READ'), String(short));
    const missing = await rejection(origin.readInto('nope.safetensors', 0, new Uint8Array(1)));
    assert.ok(isWeightcastError(missing, 'ORIGIN_NOT_FOUND'), String(missing));
    const missingStat = await rejection(origin.stat('nope/deeper.bin'));
    assert.ok(isWeightcastError(missingStat, 'ORIGIN_NOT_FOUND'), String(missingStat));
    const directory = await rejection(origin.stat('sub'));
    assert.ok(isWeightcastError(directory, 'ORIGIN_NOT_FOUND'), String(directory));
  } finally {
    await origin.close();
    await model.remove();
  }
});

test('LocalOrigin rejects paths that could escape the model directory', async () => {
  const model = await makeTempModel(spec);
  const origin = new LocalOrigin(join(model.dir, 'sub'));
  try {
    for (const path of ['../config.json', '/etc/passwd', 'dir/../../config.json', 'dir\\..\\x', '', 'a//b']) {
      const statError = await rejection(origin.stat(path));
      assert.ok(isWeightcastError(statError, 'MANIFEST_UNSAFE_PATH'), `${path}: ${String(statError)}`);
      const readError = await rejection(origin.readInto(path, 0, new Uint8Array(1)));
      assert.ok(isWeightcastError(readError, 'MANIFEST_UNSAFE_PATH'), `${path}: ${String(readError)}`);
    }
  } finally {
    await origin.close();
    await model.remove();
  }
});

test('LocalOrigin over a single file lists and serves only that file', async () => {
  const model = await makeTempModel(spec);
  const origin = new LocalOrigin(join(model.dir, 'model-00002-of-00002.safetensors'));
  try {
    assert.deepEqual(await origin.list(), [{ path: 'model-00002-of-00002.safetensors', size: 33_333 }]);
    const other = await rejection(origin.stat('config.json'));
    assert.ok(isWeightcastError(other, 'ORIGIN_NOT_FOUND'), String(other));
  } finally {
    await origin.close();
    await model.remove();
  }
});

test('LocalOrigin honours an aborted signal', async () => {
  const model = await makeTempModel(spec);
  const origin = new LocalOrigin(model.dir);
  try {
    const signal = AbortSignal.abort();
    const error = await rejection(origin.readInto('config.json', 0, new Uint8Array(2), { signal }));
    assert.ok(isWeightcastError(error, 'ABORTED'), String(error));
  } finally {
    await origin.close();
    await model.remove();
  }
});

/** An index naming each shard of `shards` for one tensor. */
function indexOf(shards: readonly string[]): string {
  const weightMap = Object.fromEntries(shards.map((shard, i) => [`layer.${i}.weight`, shard]));
  return JSON.stringify({ metadata: { total_size: 0 }, weight_map: weightMap });
}

test('LocalOrigin refuses a directory whose index names shards it does not hold, naming them', async () => {
  const shards = Array.from(
    { length: 14 },
    (_, i) => `model-${String(i + 1).padStart(5, '0')}-of-00014.safetensors`,
  );
  const model = await makeTempModel({
    'model.safetensors.index.json': indexOf(shards),
    [shards[0] as string]: 100,
    [shards[2] as string]: 100,
    'config.json': '{}',
  });
  const origin = new LocalOrigin(model.dir);
  try {
    const error = await rejection(origin.list());
    assert.ok(isWeightcastError(error, 'INDEX_SHARD_MISSING'), String(error));
    assert.match(
      error.message,
      /names 12 shards of 14 that are not there: model-00002-of-00014\.safetensors, /,
    );
    assert.match(error.message, /model-00012-of-00014\.safetensors and 2 more$/);
    assert.equal(error.details.missingCount, 12);
    assert.equal((error.details.missing as string[]).length, 10);
  } finally {
    await origin.close();
    await model.remove();
  }
});

test('LocalOrigin lists a directory whose index names only files it holds, in subfolders too', async () => {
  const model = await makeTempModel({
    'model.safetensors.index.json': indexOf(['a.safetensors', 'weights/b.safetensors']),
    'a.safetensors': 10,
    'weights/b.safetensors': 20,
  });
  const origin = new LocalOrigin(model.dir);
  try {
    assert.deepEqual(
      (await origin.list()).map((entry) => entry.path),
      ['a.safetensors', 'model.safetensors.index.json', 'weights/b.safetensors'],
    );
  } finally {
    await origin.close();
    await model.remove();
  }
});

test('LocalOrigin refuses an index that is not one with INDEX_INVALID, as an HTTP origin does', async () => {
  const model = await makeTempModel({
    'model.safetensors.index.json': '{"weight_map": [',
    'a.safetensors': 10,
  });
  const origin = new LocalOrigin(model.dir);
  try {
    const error = await rejection(origin.list());
    assert.ok(isWeightcastError(error, 'INDEX_INVALID'), String(error));
  } finally {
    await origin.close();
    await model.remove();
  }
});
