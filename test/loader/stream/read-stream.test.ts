import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { test } from 'node:test';
import { WeightcastError, isWeightcastError } from '../../../src/errors.js';
import { loadTensors, openLoadStream } from '../../../src/loader/stream/load.js';
import {
  closeModelSource,
  openModelSource,
  type ModelSource,
} from '../../../src/loader/stream/model-source.js';
import { FILES_ACTIVE_MAX_DEFAULT } from '../../../src/loader/stream/read-stream.js';
import { LocalOrigin } from '../../../src/origin/local.js';
import { rejection } from '../../origin/helpers.js';
import { PIECE_BYTES, ProbeOrigin, openFdCount, tinyModel, type TinyModel } from './helpers.js';

const KiB = 1024;

function headerBytes(source: ModelSource): number {
  return [...source.safetensors.values()].reduce((sum, index) => sum + index.dataStart, 0);
}

async function withModel(label: string, body: (model: TinyModel) => Promise<void>): Promise<void> {
  const model = await tinyModel(label);
  try {
    await body(model);
  } finally {
    await model.cleanup();
  }
}

for (const verified of [false, true]) {
  test(`every tensor is yielded once, byte-identical to the files (${verified ? 'with' : 'without'} a manifest)`, () =>
    withModel('identical', async (model) => {
      const seen = new Set<string>();
      let stats;
      for await (const tensor of loadTensors(model.dir, {
        memoryBytes: 512 * KiB,
        ...(verified ? { manifest: model.manifest } : {}),
        onStats: (s) => (stats = s),
      })) {
        assert.ok(!seen.has(tensor.name), `${tensor.name} yielded twice`);
        seen.add(tensor.name);
        assert.ok(tensor.bytes.equals(model.tensors.get(tensor.name) as Buffer), `${tensor.name} differs`);
      }
      assert.equal(seen.size, model.tensors.size);
      assert.ok(stats !== undefined);
      const s = stats as { piecesVerified: number; residentBytesPeak: number };
      assert.equal(s.piecesVerified > 0, verified);
      assert.ok(s.residentBytesPeak <= 512 * KiB);
    }));
}

test('tensors come in the order their bytes complete, not in file order', () =>
  withModel('order', async (model) => {
    const slowFile = 'model-00001-of-00003.safetensors';
    const source = await openModelSource(
      new ProbeOrigin(new LocalOrigin(model.dir), { delayMs: (path) => (path === slowFile ? 40 : 0) }),
    );
    const stream = openLoadStream(source, {}, { memoryBytes: 4096 * KiB, filesActiveMax: 3 });
    const files: string[] = [];
    for await (const { request } of stream) if (request.tag.kind === 'tensor') files.push(request.file);
    await source.origin.close();
    assert.notEqual(files[0], slowFile);
    assert.equal(files.at(-1), slowFile);
  }));

test('the memory budget holds: bytes read and not yet consumed never exceed it', () =>
  withModel('budget', async (model) => {
    const budget = 384 * KiB;
    const probe = new ProbeOrigin(new LocalOrigin(model.dir));
    const source = await openModelSource(probe, { manifest: model.manifest });
    const stream = openLoadStream(source, {}, { memoryBytes: budget, concurrency: 6 });
    let released = 0;
    let pending = 0;
    let worst = 0;
    probe.onRead = (done) => (worst = Math.max(worst, done - released));
    for await (const { bytes } of stream) {
      released += pending;
      pending = bytes.length;
      await sleep(0);
    }
    await closeModelSource(source);
    await probe.close();
    // The stream's own count (checked on every change) is the hard bound. Seen from outside, whole
    // pieces are read: the headers in them are never delivered, and a group's last piece holds the
    // next group's first bytes (copied there or carried, within the budget), so allow for those.
    assert.ok(stream.stats.residentBytesPeak <= budget, `resident peak ${stream.stats.residentBytesPeak}`);
    const slack = headerBytes(source) + FILES_ACTIVE_MAX_DEFAULT * PIECE_BYTES;
    assert.ok(worst <= budget + slack, `read ahead of the consumer by ${worst} bytes`);
    assert.ok(probe.activeMax > 1, 'reads ran in parallel');
  }));

test('a slow consumer bounds reading (back-pressure)', () =>
  withModel('backpressure', async (model) => {
    const budget = 384 * KiB;
    const probe = new ProbeOrigin(new LocalOrigin(model.dir));
    const source = await openModelSource(probe);
    const stream = openLoadStream(source, {}, { memoryBytes: budget });
    const total = stream.plan.bytesToRead;
    let consumed = 0;
    let aheadMax = 0;
    for await (const { bytes } of stream) {
      await sleep(5);
      aheadMax = Math.max(aheadMax, probe.bytesDone - consumed);
      consumed += bytes.length;
    }
    await probe.close();
    assert.ok(total > 4 * budget, 'the model is much larger than the budget');
    // The headers were read before the stream started; everything else went through the arena.
    assert.ok(
      aheadMax <= budget + headerBytes(source),
      `reading ran ${aheadMax} bytes ahead of a slow consumer`,
    );
  }));

test('an abort rejects with ABORTED and leaves no read running and no file open', () =>
  withModel('abort', async (model) => {
    const fdsBefore = await openFdCount();
    const probe = new ProbeOrigin(new LocalOrigin(model.dir), { delayMs: () => 2 });
    const controller = new AbortController();
    let count = 0;
    const error = await rejection(
      (async () => {
        for await (const tensor of loadTensors(probe, {
          memoryBytes: 384 * KiB,
          signal: controller.signal,
        })) {
          void tensor;
          if (++count === 3) controller.abort();
        }
      })(),
    );
    assert.ok(isWeightcastError(error, 'ABORTED'), String(error));
    assert.equal(probe.active, 0);
    await probe.close();
    assert.equal(await openFdCount(), fdsBefore);
  }));

test('an injected read error cancels the reads in flight and rejects with that error', () =>
  withModel('read-error', async (model) => {
    const probe = new ProbeOrigin(new LocalOrigin(model.dir), {
      delayMs: () => 3,
      fault: (path, offset) =>
        path === 'model-00002-of-00003.safetensors' && offset > 100 * KiB
          ? new WeightcastError('ORIGIN_IO', 'injected', { file: path })
          : undefined,
    });
    const error = await rejection(
      (async () => {
        for await (const tensor of loadTensors(probe, { memoryBytes: 512 * KiB, concurrency: 4 }))
          void tensor;
      })(),
    );
    assert.ok(isWeightcastError(error, 'ORIGIN_IO'), String(error));
    assert.equal(probe.active, 0, 'no read is left running');
    await probe.close();
  }));

test('leaving the loop early cancels everything still running', () =>
  withModel('break', async (model) => {
    const probe = new ProbeOrigin(new LocalOrigin(model.dir), { delayMs: () => 2 });
    for await (const tensor of loadTensors(probe, { memoryBytes: 384 * KiB })) {
      void tensor;
      break;
    }
    assert.equal(probe.active, 0);
    await probe.close();
  }));

test('corrupt bytes give PIECE_HASH_MISMATCH and no tensor with bad bytes is yielded', () =>
  withModel('corrupt', async (model) => {
    const corruptAt = 3 * PIECE_BYTES;
    const probe = new ProbeOrigin(new LocalOrigin(model.dir), {
      fault: (path, offset) =>
        path === 'model-00002-of-00003.safetensors' && offset === corruptAt ? 'corrupt' : undefined,
    });
    const yielded: string[] = [];
    const error = await rejection(
      (async () => {
        for await (const tensor of loadTensors(probe, { memoryBytes: 512 * KiB, manifest: model.manifest })) {
          assert.ok(
            tensor.bytes.equals(model.tensors.get(tensor.name) as Buffer),
            `${tensor.name} has bad bytes`,
          );
          yielded.push(tensor.name);
        }
      })(),
    );
    assert.ok(isWeightcastError(error, 'PIECE_HASH_MISMATCH'), String(error));
    assert.equal(error.details.piece, 3);
    assert.ok(yielded.length < model.tensors.size);
    assert.equal(probe.active, 0);
    await probe.close();
  }));

test('a piece corrupted once is read again and the load succeeds', () =>
  withModel('retry', async (model) => {
    const probe = new ProbeOrigin(new LocalOrigin(model.dir), {
      fault: (path, offset, _length, attempt) =>
        path === 'model-00001-of-00003.safetensors' && offset === PIECE_BYTES && attempt === 1
          ? 'corrupt'
          : undefined,
    });
    let stats;
    let count = 0;
    for await (const tensor of loadTensors(probe, {
      memoryBytes: 512 * KiB,
      manifest: model.manifest,
      onStats: (s) => (stats = s),
    })) {
      assert.ok(tensor.bytes.equals(model.tensors.get(tensor.name) as Buffer));
      count++;
    }
    assert.equal(count, model.tensors.size);
    assert.equal((stats as unknown as { piecesRejected: number }).piecesRejected, 1);
    await probe.close();
  }));

test('a tensor larger than the budget fails at once with LOADER_TENSOR_TOO_LARGE', () =>
  withModel('too-large', async (model) => {
    const error = await rejection(
      (async () => {
        for await (const tensor of loadTensors(model.dir, { memoryBytes: 64 * KiB })) void tensor;
      })(),
    );
    assert.ok(isWeightcastError(error, 'LOADER_TENSOR_TOO_LARGE'), String(error));
  }));
