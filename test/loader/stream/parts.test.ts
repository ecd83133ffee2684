import assert from 'node:assert/strict';
import { readFile, readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { test } from 'node:test';
import { readSafetensorsHeaderFromFile } from '../../../src/format/safetensors.js';
import { isWeightcastError } from '../../../src/errors.js';
import { HF_REQUESTS, HfOutput } from '../../../src/loader/stream/hf-output.js';
import { loadTensors, openLoadStream } from '../../../src/loader/stream/load.js';
import { closeModelSource, openModelSource } from '../../../src/loader/stream/model-source.js';
import { ReadStream } from '../../../src/loader/stream/read-stream.js';
import { SHM_REQUESTS, ShmOutput } from '../../../src/loader/stream/shm-output.js';
import type { LoadTag } from '../../../src/loader/stream/requests.js';
import type { Delivered, LoadedTensor } from '../../../src/loader/stream/types.js';
import { WritePipeline } from '../../../src/loader/stream/write-pipeline.js';
import { LocalOrigin } from '../../../src/origin/local.js';
import { sameFiles, tempDir } from '../../helpers/fixtures.js';
import { PIECE_BYTES, tinyModel, type TinyModel } from './helpers.js';

const KiB = 1024;

async function withModel(label: string, body: (model: TinyModel) => Promise<void>): Promise<void> {
  const model = await tinyModel(label);
  try {
    await body(model);
  } finally {
    await model.cleanup();
  }
}

/** Puts parts back together; every byte must come exactly once and every tensor end with its last part. */
class Reassembly {
  readonly whole = new Map<string, Buffer>();
  private readonly filled = new Map<string, number>();
  private readonly lastSeen = new Set<string>();

  add(tensor: LoadedTensor): void {
    const expectedBytes = tensor.shape.reduce((a, b) => a * b, 1) * widthOf(tensor.dtype);
    const into = this.whole.get(tensor.name) ?? Buffer.alloc(expectedBytes);
    this.whole.set(tensor.name, into);
    const offset = tensor.part?.offset ?? 0;
    assert.ok(offset + tensor.bytes.length <= into.length, `${tensor.name} part inside the tensor`);
    tensor.bytes.copy(into, offset);
    this.filled.set(tensor.name, (this.filled.get(tensor.name) ?? 0) + tensor.bytes.length);
    if (tensor.part === undefined || tensor.part.last) {
      assert.ok(!this.lastSeen.has(tensor.name), `${tensor.name} has one last part`);
      this.lastSeen.add(tensor.name);
    }
  }

  check(model: TinyModel): void {
    assert.equal(this.whole.size, model.tensors.size);
    for (const [name, bytes] of this.whole) {
      assert.equal(this.filled.get(name), bytes.length, `${name}: every byte delivered once`);
      assert.ok(this.lastSeen.has(name), `${name}: its last part came`);
      assert.ok(bytes.equals(model.tensors.get(name) as Buffer), `${name} differs`);
    }
  }
}

function widthOf(dtype: string): number {
  if (dtype === 'F32' || dtype === 'I32') return 4;
  if (dtype === 'F16' || dtype === 'BF16') return 2;
  if (dtype === 'F64' || dtype === 'I64') return 8;
  return 1;
}

test('a tensor larger than the budget fails whole but loads in parts, byte-identical', () =>
  withModel('parts-small-budget', async (model) => {
    const largest = Math.max(...[...model.tensors.values()].map((b) => b.length));
    const budget = 96 * KiB;
    assert.ok(largest > budget, 'the largest tensor exceeds the budget');
    await assert.rejects(
      async () => {
        for await (const tensor of loadTensors(model.dir, { memoryBytes: budget })) void tensor;
      },
      (error: unknown) => isWeightcastError(error) && error.code === 'LOADER_TENSOR_TOO_LARGE',
    );
    const parts = new Reassembly();
    let split = 0;
    let residentPeak = Infinity;
    for await (const tensor of loadTensors(model.dir, {
      memoryBytes: budget,
      partBytes: 32 * KiB,
      onStats: (stats) => (residentPeak = stats.residentBytesPeak),
    })) {
      assert.ok(tensor.bytes.length <= 32 * KiB, 'no part is larger than partBytes');
      if (tensor.part !== undefined) split++;
      parts.add(tensor);
    }
    parts.check(model);
    assert.ok(split > 0, 'some tensors came in parts');
    assert.ok(residentPeak <= budget, `resident peak ${residentPeak} within ${budget}`);
  }));

test('parts are verified and byte-identical with a manifest, within the budget', () =>
  withModel('parts-verified', async (model) => {
    const budget = 320 * KiB;
    const parts = new Reassembly();
    let stats: { piecesVerified: number; residentBytesPeak: number; bytesCopied: number } | undefined;
    for await (const tensor of loadTensors(model.dir, {
      memoryBytes: budget,
      manifest: model.manifest,
      partBytes: PIECE_BYTES,
      onStats: (s) => (stats = s),
    })) {
      parts.add(tensor);
    }
    parts.check(model);
    assert.ok(stats !== undefined && stats.piecesVerified > 0);
    assert.ok(stats.residentBytesPeak <= budget, `resident peak ${stats.residentBytesPeak}`);
  }));

test('a request of many ranges (a strided slice) comes in parts that concatenate to its bytes', () =>
  withModel('parts-strided', async (model) => {
    const file = model.manifest.files.find((f) => f.path.endsWith('.safetensors'));
    assert.ok(file !== undefined);
    const whole = await readFile(join(model.dir, file.path));
    // Every other 10,000 bytes of the file: 30 ranges, 300,000 bytes, cut into 64 KiB parts.
    const ranges = Array.from({ length: 30 }, (_, i) => ({ start: i * 20_000, end: i * 20_000 + 10_000 }));
    const expected = Buffer.concat(ranges.map((r) => whole.subarray(r.start, r.end)));
    const origin = new LocalOrigin(model.dir);
    try {
      const stream = new ReadStream(
        origin,
        [{ path: file.path, size: whole.length }],
        [{ file: file.path, ranges, tag: 'slice' }],
        { memoryBytes: 256 * KiB, partBytes: 64 * KiB },
      );
      const got = Buffer.alloc(expected.length);
      let filled = 0;
      let lasts = 0;
      for await (const { bytes, part } of stream) {
        assert.ok(part !== undefined && bytes.length <= 64 * KiB);
        bytes.copy(got, part.offset);
        filled += bytes.length;
        if (part.last) lasts++;
      }
      assert.equal(filled, expected.length);
      assert.equal(lasts, 1);
      assert.ok(got.equals(expected));
    } finally {
      await origin.close();
    }
  }));

test('the arena is the window, not the whole budget, when groups are small', () =>
  withModel('window', async (model) => {
    const source = await openModelSource(model.dir);
    try {
      const stream = openLoadStream(
        source,
        {},
        { memoryBytes: 4096 * KiB, partBytes: 32 * KiB, groupBytes: 32 * KiB, windowBytes: 128 * KiB },
      );
      assert.equal(stream.stats.arenaBytes, 128 * KiB);
      let bytes = 0;
      for await (const delivered of stream) bytes += delivered.bytes.length;
      assert.equal(bytes, stream.plan.bytesRequested);
      assert.ok(stream.stats.residentBytesPeak <= 128 * KiB);
    } finally {
      await closeModelSource(source);
    }
  }));

test('a held delivery keeps its bytes and its budget until let go', () =>
  withModel('hold', async (model) => {
    const source = await openModelSource(model.dir);
    try {
      const stream = openLoadStream(source, {}, { memoryBytes: 4096 * KiB });
      const held: Array<{ delivered: Delivered<LoadTag>; copy: Buffer; letGo: () => void }> = [];
      for await (const delivered of stream) {
        if (held.length < 3 && delivered.hold !== undefined) {
          held.push({ delivered, copy: Buffer.from(delivered.bytes), letGo: delivered.hold() });
        }
      }
      assert.equal(held.length, 3);
      const residentWhileHeld = stream.stats.residentBytes;
      assert.ok(residentWhileHeld > 0, 'held groups stay counted');
      for (const { delivered, copy, letGo } of held) {
        assert.ok(delivered.bytes.equals(copy), 'held bytes were not overwritten');
        letGo();
        letGo();
      }
      assert.equal(stream.stats.residentBytes, 0);
    } finally {
      await closeModelSource(source);
    }
  }));

test('hf and shm outputs written in parts with writes in flight match whole-tensor output', () =>
  withModel('parts-outputs', async (model) => {
    const out = await tempDir('loader-parts-out');
    try {
      const names = (await readdir(model.dir)).sort();
      const source = await openModelSource(model.dir, { manifest: model.manifest });
      try {
        const hfTo = join(out.path, 'hf');
        const hf = await HfOutput.create(hfTo, source);
        const hfStream = openLoadStream(source, HF_REQUESTS, { memoryBytes: 512 * KiB, partBytes: 16 * KiB });
        for await (const delivered of hfStream) await hf.write(delivered);
        await hf.finish();
        assert.ok(await sameFiles(model.dir, hfTo, names));

        const shmTo = join(out.path, 'shm');
        const shm = await ShmOutput.create(shmTo, source);
        const shmStream = openLoadStream(source, SHM_REQUESTS, {
          memoryBytes: 512 * KiB,
          partBytes: 16 * KiB,
        });
        for await (const delivered of shmStream) await shm.write(delivered);
        await shm.finish();
        let count = 0;
        for (const name of await readdir(shmTo)) {
          if (!name.endsWith('.safetensors')) continue;
          const path = join(shmTo, name);
          const header = await readSafetensorsHeaderFromFile(path);
          const bytes = await readFile(path);
          for (const tensor of header.tensors) {
            assert.ok(
              bytes.subarray(tensor.start, tensor.end).equals(model.tensors.get(tensor.name) as Buffer),
            );
            count++;
          }
        }
        assert.equal(count, model.tensors.size);
        assert.equal(shmStream.stats.residentBytes, 0, 'every held write was let go');
      } finally {
        await closeModelSource(source);
      }
    } finally {
      await out.cleanup();
    }
  }));

test('a failed write in flight is thrown by the next write or by drain', async () => {
  const pipeline = new WritePipeline(2);
  let released = 0;
  const delivered: Delivered<string> = {
    request: { file: 'f', ranges: [], tag: 't' },
    bytes: Buffer.alloc(1),
    hold: () => () => released++,
  };
  await pipeline.add(delivered, () => Promise.reject(new Error('disk full')));
  await assert.rejects(pipeline.drain(), /disk full/);
  assert.equal(released, 1, 'the held bytes were let go');
});

test('a part over the budget is named as a part of its tensor, with the tensor size', () =>
  withModel('parts-over-budget', async (model) => {
    const [name, bytes] = [...model.tensors].reduce((a, b) => (b[1].length > a[1].length ? b : a));
    assert.ok(bytes.length > 32 * KiB, 'the largest tensor is cut into parts');
    await assert.rejects(
      async () => {
        const tensors = loadTensors(model.dir, { memoryBytes: 16 * KiB, partBytes: 32 * KiB });
        for await (const tensor of tensors) void tensor;
      },
      (error: unknown) =>
        isWeightcastError(error, 'LOADER_TENSOR_TOO_LARGE') &&
        error.message.includes(
          `a part of tensor "${name}" (${bytes.length} bytes, read in parts of at most ${32 * KiB}) needs`,
        ),
    );
  }));
