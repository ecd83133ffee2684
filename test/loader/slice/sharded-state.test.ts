/**
 * ShardedStateWriter: vLLM's file names, parts cut before the limit would be exceeded and never
 * through a tensor, valid safetensors whatever order tensors come in, and nothing under a final name
 * until `finish`.
 */

import assert from 'node:assert/strict';
import { readFile, readdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, it } from 'node:test';
import { parseSafetensorsBuffer } from '../../../src/format/safetensors.js';
import { ShardedStateWriter, shardedStateFileName } from '../../../src/loader/sharded-state/writer.js';
import { deterministicBytes, tempDir } from '../../helpers/fixtures.js';

let work: { path: string; cleanup: () => Promise<void> };
before(async () => {
  work = await tempDir('sharded-state');
});
after(async () => {
  await work.cleanup();
});

const PART = 10_000;
/** [name, dtype, shape] in the order they are added; bytes: 4000, 6002 (alone), 3000, 3000, 12000, 2. */
const TENSORS = [
  ['a.weight', 'F32', [10, 100]],
  ['b.weight', 'BF16', [3001]],
  ['c.weight', 'F16', [1500]],
  ['d.weight', 'U8', [3000]],
  ['big.weight', 'F32', [3000]],
  ['tail.weight', 'BF16', [1]],
] as const;

it('names parts model-rank-R-part-P, cuts before the limit, never splits a tensor', async () => {
  const dir = join(work.path, 'parts');
  const writer = new ShardedStateWriter(dir, 3, { partBytesMax: PART });
  const expected = new Map<string, Buffer>();
  for (const [name, dtype, shape] of TENSORS) {
    const width = dtype === 'F32' ? 4 : dtype === 'U8' ? 1 : 2;
    const bytes = deterministicBytes(name, shape.reduce((a: number, b: number) => a * b, 1) * width);
    expected.set(name, bytes);
    await writer.add(name, dtype, [...shape], bytes);
    // Nothing under a final name before finish.
    assert.deepEqual(
      (await readdir(dir)).filter((n) => !n.endsWith('.weightcast-partial')),
      [],
    );
  }
  const { files, parts } = await writer.finish();
  assert.deepEqual(
    files,
    [0, 1, 2, 3, 4].map((part) => shardedStateFileName(3, part)),
  );
  assert.equal(files[0], 'model-rank-3-part-0.safetensors');
  // a (4000) + b (6002) would pass 10000, so b begins part 1 and c (3000) joins it; d would pass it
  // again; big (12000) is over the limit by itself and gets a part of its own; tail follows it.
  assert.deepEqual(
    parts.map((p) => p.tensors),
    [['a.weight'], ['b.weight', 'c.weight'], ['d.weight'], ['big.weight'], ['tail.weight']],
  );
  for (const part of parts) {
    if (part.tensors.length > 1) assert.ok(part.dataBytes <= PART, `${part.file} within the limit`);
  }
  assert.ok(parts.some((p) => p.tensors.length === 1 && p.tensors[0] === 'big.weight'));
  assert.deepEqual((await readdir(dir)).sort(), [...files].sort(), 'only the final files remain');
  for (const part of parts) {
    const buffer = await readFile(join(dir, part.file));
    const header = parseSafetensorsBuffer(buffer, part.file);
    assert.equal(header.dataStart % 8, 0, 'data section 8-aligned');
    assert.deepEqual(header.metadata, { format: 'pt' });
    assert.deepEqual(
      header.tensors.map((t) => t.name),
      part.tensors,
    );
    for (const t of header.tensors) {
      assert.ok(buffer.subarray(t.start, t.end).equals(expected.get(t.name) as Buffer), t.name);
    }
  }
});

it('decides parts greedily in arrival order', async () => {
  const dir = join(work.path, 'greedy');
  const writer = new ShardedStateWriter(dir, 0, { partBytesMax: 100 });
  for (const [name, size] of [
    ['x', 60],
    ['y', 40],
    ['z', 1],
  ] as const) {
    await writer.add(name, 'U8', [size], Buffer.alloc(size, 1));
  }
  const { parts } = await writer.finish();
  assert.deepEqual(
    parts.map((p) => p.tensors),
    [['x', 'y'], ['z']],
  );
});

it('starts a new part when the header reserve is full', async () => {
  const dir = join(work.path, 'reserve');
  const writer = new ShardedStateWriter(dir, 1, { partBytesMax: 1 << 20, headerBytesReserve: 256 });
  for (let index = 0; index < 12; index++) {
    await writer.add(`layer.${index}.weight`, 'U8', [4], Buffer.alloc(4, index));
  }
  const { files, parts } = await writer.finish();
  assert.ok(files.length > 1, 'several parts');
  let count = 0;
  for (const part of parts) {
    const header = parseSafetensorsBuffer(await readFile(join(dir, part.file)), part.file);
    assert.equal(header.dataStart, 256);
    count += header.tensors.length;
  }
  assert.equal(count, 12);
});

it('writes part 0 for a rank with no tensors, and removes stale parts of an earlier run', async () => {
  const dir = join(work.path, 'stale');
  const first = new ShardedStateWriter(dir, 2, { partBytesMax: 10 });
  for (const name of ['p', 'q', 'r']) await first.add(name, 'U8', [8], Buffer.alloc(8));
  assert.equal((await first.finish()).files.length, 3);
  await writeFile(join(dir, 'model-rank-5-part-9.safetensors'), 'another rank');
  const second = new ShardedStateWriter(dir, 2, { partBytesMax: 10 });
  const { files } = await second.finish();
  assert.deepEqual(files, ['model-rank-2-part-0.safetensors']);
  assert.deepEqual((await readdir(dir)).sort(), [
    'model-rank-2-part-0.safetensors',
    'model-rank-5-part-9.safetensors',
  ]);
  const header = parseSafetensorsBuffer(await readFile(join(dir, files[0] as string)), 'empty');
  assert.equal(header.tensors.length, 0);
});

it('refuses wrong sizes and duplicate names; abandon leaves nothing', async () => {
  const dir = join(work.path, 'bad');
  const writer = new ShardedStateWriter(dir, 0, { partBytesMax: 1000 });
  await writer.add('ok', 'BF16', [2, 2], Buffer.alloc(8));
  await assert.rejects(
    () => new ShardedStateWriter(join(dir, 'x'), 0).add('w', 'BF16', [3], Buffer.alloc(5)),
    { code: 'SAFETENSORS_WRITE_MISMATCH' },
  );
  await assert.rejects(() => writer.add('ok', 'BF16', [2, 2], Buffer.alloc(8)), {
    code: 'SAFETENSORS_DUPLICATE_TENSOR',
  });
  await writer.abandon();
  assert.deepEqual(await readdir(dir), []);
});
