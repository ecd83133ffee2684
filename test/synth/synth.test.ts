import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { mkdtemp, readFile, readdir, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { isWeightcastError } from '../../src/errors.js';
import { readIndexJson } from '../../src/format/index-json-file.js';
import { readSafetensorsHeaderFromFile } from '../../src/format/safetensors.js';
import type { SynthArch, SynthDtype } from '../../src/synth/architectures.js';
import { decodeBf16, decodeF16, isE4m3Nan } from '../../src/format/float-bits.js';
import { synthesizeModel, type SynthResult } from '../../src/synth/synth.js';

const MIB = 1024 * 1024;

async function withTempDir<T>(label: string, body: (dir: string) => Promise<T>): Promise<T> {
  const dir = await mkdtemp(join(tmpdir(), `weightcast-synth-${label}-`));
  try {
    return await body(dir);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

async function sha256(path: string): Promise<string> {
  return createHash('sha256')
    .update(await readFile(path))
    .digest('hex');
}

/** Every tensor value of every shard, checked: finite floats, no FP8 NaN patterns. */
async function checkShards(dir: string, result: SynthResult): Promise<number> {
  const index = await readIndexJson(join(dir, 'model.safetensors.index.json'));
  const shardFiles = result.files.map((file) => file.path).filter((path) => path.endsWith('.safetensors'));
  let tensorBytes = 0;
  const seen = new Set<string>();
  for (const file of shardFiles) {
    const header = await readSafetensorsHeaderFromFile(join(dir, file));
    assert.deepEqual(header.metadata, { format: 'pt' });
    const bytes = await readFile(join(dir, file));
    for (const tensor of header.tensors) {
      assert.equal(index.weightMap.get(tensor.name), file, tensor.name);
      seen.add(tensor.name);
      tensorBytes += tensor.end - tensor.start;
      checkValues(bytes.subarray(tensor.start, tensor.end), tensor.dtype, tensor.name);
    }
  }
  assert.equal(seen.size, index.weightMap.size);
  assert.equal(index.metadata['total_size'], tensorBytes);
  return tensorBytes;
}

function checkValues(bytes: Buffer, dtype: string, name: string): void {
  if (dtype === 'F8_E4M3') {
    assert.equal(bytes.findIndex(isE4m3Nan), -1, name);
  } else if (dtype === 'F32') {
    for (let i = 0; i < bytes.length; i += 4) assert.ok(Number.isFinite(bytes.readFloatLE(i)), name);
  } else {
    const decode = dtype === 'BF16' ? decodeBf16 : decodeF16;
    for (let i = 0; i < bytes.length; i += 2) {
      if (!Number.isFinite(decode(bytes.readUInt16LE(i)))) assert.fail(`${name}: non-finite at ${i}`);
    }
  }
  if (name.endsWith('_scale') || name.endsWith('_scale_inv')) {
    for (let i = 0; i < bytes.length; i += 4) assert.ok(bytes.readFloatLE(i) > 0, name);
  }
}

const cases: { arch: SynthArch; dtype: SynthDtype; shards: number }[] = [
  { arch: 'llama', dtype: 'bf16', shards: 3 },
  { arch: 'llama', dtype: 'f16', shards: 1 },
  { arch: 'qwen2-moe', dtype: 'f8_e4m3', shards: 2 },
  { arch: 'deepseek-v3', dtype: 'f8_e4m3', shards: 3 },
  { arch: 'deepseek-v3', dtype: 'f32', shards: 2 },
];

for (const { arch, dtype, shards } of cases) {
  test(`${arch} ${dtype}: shards parse, index and config match the files`, async () => {
    await withTempDir(arch, async (dir) => {
      const result = await synthesizeModel({ dir, arch, dtype, shards, sizeBytes: 2 * MIB, seed: 11 });
      const names = (await readdir(dir)).sort();
      assert.deepEqual(
        names,
        result.files.map((file) => file.path),
      );
      for (const expected of [
        'config.json',
        'generation_config.json',
        'model.safetensors.index.json',
        'special_tokens_map.json',
        'tokenizer.json',
        'tokenizer_config.json',
        `model-00001-of-0000${shards}.safetensors`,
        `model-0000${shards}-of-0000${shards}.safetensors`,
      ]) {
        assert.ok(names.includes(expected), expected);
      }
      for (const file of result.files) assert.equal((await stat(join(dir, file.path))).size, file.size);
      assert.equal(await checkShards(dir, result), result.tensorBytes);
      assert.ok(Math.abs(result.tensorBytes - 2 * MIB) <= 0.1 * 2 * MIB);
      const config = JSON.parse(await readFile(join(dir, 'config.json'), 'utf8')) as Record<string, unknown>;
      assert.equal(config['hidden_size'], result.dims.hidden);
      assert.equal(config['num_hidden_layers'], result.dims.layers);
      assert.equal(config['vocab_size'], result.dims.vocab);
      for (const file of ['tokenizer.json', 'tokenizer_config.json', 'special_tokens_map.json']) {
        const text = await readFile(join(dir, file), 'utf8');
        assert.doesNotThrow(() => JSON.parse(text), file);
      }
    });
  });
}

test('the same seed writes identical files, another seed different shards', async () => {
  await withTempDir('determinism', async (dir) => {
    const options = { arch: 'deepseek-v3', dtype: 'f8_e4m3', layers: 2, hidden: 128, experts: 4 } as const;
    const digests = async (sub: string, seed: number): Promise<Map<string, string>> => {
      const result = await synthesizeModel({ ...options, dir: join(dir, sub), seed });
      const out = new Map<string, string>();
      for (const file of result.files) out.set(file.path, await sha256(join(dir, sub, file.path)));
      return out;
    };
    const first = await digests('a', 1);
    assert.deepEqual(await digests('b', 1), first);
    const other = await digests('c', 2);
    for (const [path, digest] of first) {
      if (path.endsWith('.safetensors')) assert.notEqual(other.get(path), digest, path);
      else assert.equal(other.get(path), digest, path);
    }
  });
});

test('an aborted run stops with ABORTED', async () => {
  await withTempDir('abort', async (dir) => {
    const controller = new AbortController();
    const run = synthesizeModel(
      { dir, sizeBytes: 24 * MIB },
      {
        signal: controller.signal,
        onProgress: (progress) => {
          if (progress.bytesWritten > 8 * MIB) controller.abort(new Error('test'));
        },
      },
    );
    await assert.rejects(run, (error) => isWeightcastError(error, 'ABORTED'));
    assert.deepEqual(await readdir(dir), [], 'the partial shard is removed');
  });
});

test('progress reaches the total', async () => {
  await withTempDir('progress', async (dir) => {
    let last = { bytesWritten: 0, bytesTotal: -1 };
    const result = await synthesizeModel(
      { dir, sizeBytes: MIB },
      { onProgress: (progress) => (last = progress) },
    );
    assert.equal(last.bytesWritten, last.bytesTotal);
    assert.equal(last.bytesTotal, result.totalBytes);
  });
});

test("another model's shards in the directory are refused before anything is written; the same names are replaced", async () => {
  await withTempDir('stale', async (dir) => {
    const first = await synthesizeModel({ dir, sizeBytes: MIB, shards: 3, seed: 1 });
    const digests = async (): Promise<Map<string, string>> => {
      const out = new Map<string, string>();
      for (const name of (await readdir(dir)).sort()) out.set(name, await sha256(join(dir, name)));
      return out;
    };
    const before = await digests();
    await assert.rejects(
      synthesizeModel({ dir, sizeBytes: MIB, shards: 2, seed: 2 }),
      (error) =>
        isWeightcastError(error, 'USAGE') &&
        error.message.includes(
          '(model-00001-of-00003.safetensors, model-00002-of-00003.safetensors, model-00003-of-00003.safetensors)',
        ) &&
        /remove them or choose an empty directory/.test(error.message),
    );
    assert.deepEqual(await digests(), before, 'nothing was written or removed');
    // The same files under the same names: replaced, as before.
    const again = await synthesizeModel({ dir, sizeBytes: MIB, shards: 3, seed: 2 });
    assert.deepEqual(again.files, first.files);
    const after = await digests();
    assert.deepEqual([...after.keys()], [...before.keys()]);
    assert.notEqual(
      after.get('model-00001-of-00003.safetensors'),
      before.get('model-00001-of-00003.safetensors'),
    );
  });
});
