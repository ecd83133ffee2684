import assert from 'node:assert/strict';
import { readFile, readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { test } from 'node:test';
import { memoryIo } from '../../../src/cli/io.js';
import { loadCommand } from '../../../src/cli/commands/load.js';
import { readSafetensorsHeaderFromFile } from '../../../src/format/safetensors.js';
import { writeManifest } from '../../../src/manifest/manifest.js';
import { loadTensors } from '../../../src/loader/stream/load.js';
import { synthesizeModel } from '../../../src/synth/synth.js';
import { tempDir, sameFiles } from '../../helpers/fixtures.js';
import { serve } from '../../origin/helpers.js';
import { tinyModel } from './helpers.js';

const flags = { memoryMb: '1', concurrency: '4' };

test('hf output is byte-identical to the source, with and without a manifest', async () => {
  const model = await tinyModel('hf');
  const out = await tempDir('loader-hf-out');
  try {
    const manifestPath = join(out.path, 'manifest.json');
    await writeManifest(manifestPath, model.manifest);
    const names = (await readdir(model.dir)).sort();
    for (const [label, extra] of [
      ['plain', {}],
      ['verified', { manifest: manifestPath }],
    ] as const) {
      const to = join(out.path, label);
      const io = memoryIo();
      const code = await loadCommand(model.dir, { ...flags, ...extra, format: 'hf', to, json: true }, io);
      assert.equal(code, 0, io.out.join('') + io.err.join(''));
      assert.deepEqual((await readdir(to)).sort(), names);
      assert.ok(await sameFiles(model.dir, to, names));
      const summary = JSON.parse(io.out.at(-1) ?? '{}') as { verified: boolean; peakRssBytes: number };
      assert.equal(summary.verified, label === 'verified');
      assert.ok(summary.peakRssBytes > 0);
    }
  } finally {
    await out.cleanup();
    await model.cleanup();
  }
});

for (const format of ['hf', 'shm'] as const) {
  test(`${format} output into a directory holding another model's shards exits 2 and writes nothing; a reload replaces`, async () => {
    const model = await tinyModel(`${format}-stale`);
    const out = await tempDir(`loader-${format}-stale`);
    try {
      // An older model of two shards, where the new one has three of other names.
      const to = join(out.path, 'model');
      await synthesizeModel({
        dir: to,
        arch: 'llama',
        shards: 2,
        seed: 1,
        hidden: 64,
        layers: 2,
        vocab: 320,
      });
      const before = (await readdir(to)).sort();
      const io = memoryIo();
      const code = await loadCommand(model.dir, { ...flags, format, to, json: true }, io);
      assert.equal(code, 2, io.err.join(''));
      const error = (JSON.parse(io.out.at(-1) ?? '{}') as { error: { code: string; message: string } }).error;
      assert.equal(error.code, 'USAGE');
      assert.match(
        error.message,
        /already holds model files the new model would not replace \(model-00001-of-00002\.safetensors, model-00002-of-00002\.safetensors\)/,
      );
      assert.deepEqual((await readdir(to)).sort(), before, 'nothing written, nothing removed');
      // Into its own earlier copy: every file is replaced under its name.
      const copy = join(out.path, 'copy');
      for (let run = 0; run < 2; run++) {
        const again = memoryIo();
        assert.equal(
          await loadCommand(model.dir, { ...flags, format, to: copy }, again),
          0,
          again.err.join(''),
        );
      }
      const names = (await readdir(model.dir)).sort();
      assert.deepEqual((await readdir(copy)).sort(), names);
      // shm lays the safetensors files out afresh (aligned tensors); hf is byte for byte.
      if (format === 'hf') assert.ok(await sameFiles(model.dir, copy, names));
    } finally {
      await out.cleanup();
      await model.cleanup();
    }
  });
}

test('shm output is safetensors that the format reader accepts, holding the same tensors', async () => {
  const model = await tinyModel('shm');
  const out = await tempDir('loader-shm-out');
  try {
    const io = memoryIo();
    const code = await loadCommand(model.dir, { ...flags, format: 'shm', to: out.path }, io);
    assert.equal(code, 0, io.err.join(''));
    let count = 0;
    for (const name of await readdir(out.path)) {
      if (!name.endsWith('.safetensors')) continue;
      const path = join(out.path, name);
      const header = await readSafetensorsHeaderFromFile(path);
      const bytes = await readFile(path);
      for (const tensor of header.tensors) {
        assert.ok(bytes.subarray(tensor.start, tensor.end).equals(model.tensors.get(tensor.name) as Buffer));
        const width = tensor.dtype === 'F32' ? 4 : tensor.dtype === 'BF16' ? 2 : 1;
        assert.equal(tensor.start % width, 0, `${tensor.name} is aligned to its element size`);
        count++;
      }
    }
    assert.equal(count, model.tensors.size);
    assert.ok(io.out.join('').includes('loaded'));
  } finally {
    await out.cleanup();
    await model.cleanup();
  }
});

test('loads from a real HTTP origin with verification', async () => {
  const model = await tinyModel('http');
  const server = await serve(model.dir);
  try {
    let count = 0;
    for await (const tensor of loadTensors(server.url, {
      memoryBytes: 1024 * 1024,
      manifest: model.manifest,
    })) {
      assert.ok(tensor.bytes.equals(model.tensors.get(tensor.name) as Buffer), tensor.name);
      count++;
    }
    assert.equal(count, model.tensors.size);
  } finally {
    await server.close();
    await model.cleanup();
  }
});

test('bad flags are usage errors', async () => {
  const io = memoryIo();
  assert.equal(await loadCommand('x', { ...flags, format: 'tar' }, io), 2);
  assert.equal(await loadCommand('x', { ...flags, format: 'hf' }, io), 2);
});
