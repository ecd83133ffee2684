import assert from 'node:assert/strict';
import { readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { test } from 'node:test';
import { isWeightcastError } from '../../../src/errors.js';
import { loadModel, type LoadModelEvent } from '../../../src/loader/stream/load-model.js';
import { PARTIAL_SUFFIX } from '../../../src/loader/stream/output-files.js';
import { LocalOrigin } from '../../../src/origin/local.js';
import { sameFiles, tempDir } from '../../helpers/fixtures.js';
import { serve } from '../../origin/helpers.js';
import { PIECE_BYTES, ProbeOrigin, tinyModel } from './helpers.js';

test('loadModel streams a whole model from an HTTP origin into hf files, every piece verified', async () => {
  const model = await tinyModel('load-model-http');
  const server = await serve(model.dir);
  const out = await tempDir('load-model-out');
  try {
    const to = join(out.path, 'copy');
    const events: LoadModelEvent[] = [];
    const result = await loadModel(server.url, {
      to,
      format: 'hf',
      manifest: model.manifest,
      memoryBytes: 1024 * 1024,
      // Smaller than the largest tensor (128 KiB): parts are rounded up to whole 64 KiB pieces.
      partBytes: 100 * 1024,
      onEvent: (event) => events.push(event),
    });
    const names = (await readdir(model.dir)).sort();
    assert.deepEqual((await readdir(to)).sort(), names);
    assert.ok(await sameFiles(model.dir, to, names));
    const tensorBytes = [...model.tensors.values()].reduce((sum, bytes) => sum + bytes.length, 0);
    assert.equal(result.tensors, model.tensors.size);
    assert.equal(result.tensorBytes, tensorBytes);
    assert.equal(result.verified, true);
    const modelBytes = model.manifest.files.reduce((sum, file) => sum + file.size, 0);
    assert.equal(result.bytes, modelBytes);
    // hf reads every byte of every file, each piece once.
    const pieces = model.manifest.files.reduce((sum, file) => sum + Math.ceil(file.size / PIECE_BYTES), 0);
    assert.equal(result.piecesVerified, pieces);
    assert.equal(result.piecesRejected, 0);
    assert.ok(result.residentBytesPeak <= result.memoryBytes);
    assert.deepEqual(events[0], {
      type: 'opened',
      verified: true,
      files: model.manifest.files.length,
      bytes: modelBytes,
    });
    const last = events.at(-1);
    assert.ok(last?.type === 'progress' && last.bytesDelivered === last.bytesTotal, JSON.stringify(last));
  } finally {
    await out.cleanup();
    await server.close();
    await model.cleanup();
  }
});

test('loadModel leaves no partial or unverified file when the origin keeps sending corrupt bytes', async () => {
  const model = await tinyModel('load-model-corrupt');
  const out = await tempDir('load-model-corrupt-out');
  const origin = new ProbeOrigin(new LocalOrigin(model.dir), {
    fault: (path) => (path.endsWith('00002-of-00003.safetensors') ? 'corrupt' : undefined),
  });
  try {
    const to = join(out.path, 'shm');
    await assert.rejects(
      loadModel(origin, { to, format: 'shm', manifest: model.manifest, memoryBytes: 1024 * 1024 }),
      (error) => isWeightcastError(error, 'PIECE_HASH_MISMATCH'),
    );
    // Files completed before the failure stay (each verified and whole); nothing else does.
    const left = await readdir(to);
    assert.deepEqual(
      left.filter((name) => name.endsWith(PARTIAL_SUFFIX) || name.includes('00002-of-00003')),
      [],
    );
    assert.ok(
      await sameFiles(
        model.dir,
        to,
        left.filter((name) => !name.endsWith('.safetensors')),
      ),
    );
  } finally {
    await origin.close();
    await out.cleanup();
    await model.cleanup();
  }
});
