import { after, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdir, mkdtemp, readFile, rm, truncate, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { memoryIo } from '../../src/cli/io.js';
import { runCli } from '../../src/cli/main.js';
import { INDEX_FILE_NAME } from '../../src/format/index-json.js';
import { writeIndexJson } from '../../src/format/index-json-file.js';
import {
  compareNatural,
  formatParameterCount,
  summarizeModel,
  tensorGroup,
  type InspectSummary,
} from '../../src/format/inspect.js';
import { parseSafetensorsBuffer } from '../../src/format/safetensors.js';
import {
  SafetensorsFileWriter,
  planSafetensorsLayout,
  type TensorSpec,
} from '../../src/format/safetensors-writer.js';

const scratch = await mkdtemp(join(tmpdir(), 'weightcast-inspect-'));
after(() => rm(scratch, { recursive: true, force: true }));

/** A small Llama-like model: embeddings, `layers` blocks, final norm and lm_head. */
function llamaSpecs(layers: number): TensorSpec[] {
  const specs: TensorSpec[] = [{ name: 'model.embed_tokens.weight', dtype: 'BF16', shape: [32, 8] }];
  for (let layer = 0; layer < layers; layer++) {
    specs.push({ name: `model.layers.${layer}.self_attn.q_proj.weight`, dtype: 'BF16', shape: [8, 8] });
    specs.push({ name: `model.layers.${layer}.mlp.up_proj.weight`, dtype: 'BF16', shape: [16, 8] });
    specs.push({ name: `model.layers.${layer}.input_layernorm.weight`, dtype: 'F32', shape: [8] });
  }
  specs.push({ name: 'model.norm.weight', dtype: 'F32', shape: [8] });
  specs.push({ name: 'lm_head.weight', dtype: 'BF16', shape: [32, 8] });
  return specs;
}

async function writeShard(path: string, specs: TensorSpec[]): Promise<void> {
  const layout = planSafetensorsLayout(specs, { format: 'pt' });
  const writer = await SafetensorsFileWriter.create(path, layout);
  await writer.write(new Uint8Array(layout.fileSize - layout.dataStart).fill(1));
  await writer.close();
}

const shardName = (i: number, n: number): string =>
  `model-${String(i).padStart(5, '0')}-of-${String(n).padStart(5, '0')}.safetensors`;

/** Writes the specs split over `shards` files and an index that maps every tensor to its shard. */
async function writeModel(dir: string, specs: TensorSpec[], shards: number): Promise<Map<string, string>> {
  await mkdir(dir, { recursive: true });
  const weightMap = new Map<string, string>();
  const perShard = Math.ceil(specs.length / shards);
  for (let i = 0; i < shards; i++) {
    const part = specs.slice(i * perShard, (i + 1) * perShard);
    await writeShard(join(dir, shardName(i + 1, shards)), part);
    for (const spec of part) weightMap.set(spec.name, shardName(i + 1, shards));
  }
  await writeIndexJson(join(dir, INDEX_FILE_NAME), { metadata: { total_size: 0 }, weightMap });
  return weightMap;
}

async function inspect(...args: string[]): Promise<{ code: number; out: string; err: string }> {
  const io = memoryIo();
  const code = await runCli(['inspect', ...args], io);
  return { code, out: io.out.join(''), err: io.err.join('') };
}

async function inspectJson(
  path: string,
): Promise<{ code: number; summary: InspectSummary & { ok: boolean } }> {
  const { code, out } = await inspect(path, '--json');
  const lines = out.trimEnd().split('\n');
  assert.equal(lines.length, 1, 'exactly one JSON object');
  return { code, summary: JSON.parse(lines[0] ?? '') as InspectSummary & { ok: boolean } };
}

describe('summaries', () => {
  test('tensors group by layer, other tensors by module', () => {
    assert.deepEqual(tensorGroup('model.layers.12.mlp.up_proj.weight'), {
      name: 'model.layers.12',
      layer: 12,
    });
    assert.deepEqual(tensorGroup('model.layers.3.mlp.experts.7.w1.weight'), {
      name: 'model.layers.3',
      layer: 3,
    });
    assert.deepEqual(tensorGroup('transformer.h.0.attn.c_attn.weight'), {
      name: 'transformer.h.0',
      layer: 0,
    });
    assert.deepEqual(tensorGroup('model.embed_tokens.weight'), { name: 'model.embed_tokens', layer: null });
    assert.deepEqual(tensorGroup('lm_head.weight'), { name: 'lm_head', layer: null });
    assert.deepEqual(tensorGroup('scale'), { name: 'scale', layer: null });
  });

  test('parameter counts read like model names', () => {
    assert.equal(formatParameterCount(8_030_261_248), '8.03B');
    assert.equal(formatParameterCount(70_553_706_496), '70.6B');
    assert.equal(formatParameterCount(405_000_000_000), '405B');
    assert.equal(formatParameterCount(999_960_000), '1.00B');
    assert.equal(formatParameterCount(135_000_000), '135M');
    assert.equal(formatParameterCount(1_500_000_000_000), '1.50T');
    assert.equal(formatParameterCount(999), '999');
    assert.equal(formatParameterCount(0), '0');
  });

  test('natural order puts layer 2 before layer 10', () => {
    const names = ['model.layers.10', 'model.norm', 'lm_head', 'model.layers.2', 'model.embed_tokens'];
    assert.deepEqual(names.sort(compareNatural), [
      'lm_head',
      'model.embed_tokens',
      'model.layers.2',
      'model.layers.10',
      'model.norm',
    ]);
  });

  test('totals per group and dtype from headers in memory', () => {
    const layout = planSafetensorsLayout(llamaSpecs(2));
    const buffer = new Uint8Array(layout.fileSize);
    buffer.set(layout.header);
    const header = parseSafetensorsBuffer(buffer, 'model.safetensors');
    const summary = summarizeModel({
      path: 'm',
      index: null,
      files: [{ file: 'model.safetensors', header }],
    });
    assert.deepEqual(
      summary.groups.map((g) => [g.name, g.tensorCount, g.parameters]),
      [
        ['lm_head', 1, 256],
        ['model.embed_tokens', 1, 256],
        ['model.layers.0', 3, 64 + 128 + 8],
        ['model.layers.1', 3, 200],
        ['model.norm', 1, 8],
      ],
    );
    assert.deepEqual(summary.dtypes, [
      { dtype: 'BF16', tensorCount: 6, parameters: 896, bytes: 1792 },
      { dtype: 'F32', tensorCount: 3, parameters: 24, bytes: 96 },
    ]);
    assert.deepEqual(summary.totals, {
      tensorCount: 9,
      parameters: 920,
      bytes: 1888,
      parametersHuman: '920',
    });
    assert.deepEqual(summary.problems, []);
  });
});

describe('weightcast inspect', () => {
  test('a healthy sharded model: exit 0, readable aligned tables', async () => {
    const dir = join(scratch, 'healthy');
    await writeModel(dir, llamaSpecs(12), 2);
    const { code, out, err } = await inspect(dir);
    assert.equal(code, 0, err);
    assert.match(out, /^.*healthy: 2\.\d+K parameters \(2,\d{3}\) in 39 tensors/);
    assert.match(out, /No problems found\./);
    const lines = out.split('\n');
    const heading = lines.find((line) => line.startsWith('GROUP')) ?? '';
    const layer10 = lines.find((line) => line.startsWith('model.layers.10 ')) ?? '';
    const layer9 = lines.findIndex((line) => line.startsWith('model.layers.9 '));
    assert.ok(layer9 < lines.indexOf(layer10), 'layers in numeric order');
    // Right-aligned numbers end in the same column as their heading.
    assert.equal(heading.indexOf('TENSORS') + 'TENSORS'.length, layer10.indexOf(' 3 ') + 2);

    const { summary } = await inspectJson(dir);
    assert.equal(summary.ok, true);
    assert.equal(summary.index, INDEX_FILE_NAME);
    assert.deepEqual(
      summary.files.map((f) => [f.file, f.status]),
      [
        [shardName(1, 2), 'ok'],
        [shardName(2, 2), 'ok'],
      ],
    );
    assert.equal(summary.groups.length, 15);
    assert.equal(summary.totals.tensorCount, 39);
  });

  test('a corrupt shard and a wrong index: exit 1, every problem listed', async () => {
    const dir = join(scratch, 'broken');
    const specs = llamaSpecs(4);
    const weightMap = await writeModel(dir, specs, 3);
    // Shard 3 loses its last bytes; shard 2's first tensor is claimed by shard 1; the index gains a
    // tensor no file has and a shard that does not exist, and forgets one tensor of shard 1.
    const third = join(dir, shardName(3, 3));
    await truncate(third, (await readFile(third)).length - 4);
    const movedTensor = specs[5]?.name ?? '';
    assert.equal(weightMap.get(movedTensor), shardName(2, 3));
    weightMap.set(movedTensor, shardName(1, 3));
    weightMap.set('model.layers.0.ghost.weight', shardName(1, 3));
    weightMap.set('model.layers.9.mlp.up_proj.weight', 'model-00004-of-00004.safetensors');
    weightMap.delete('model.embed_tokens.weight');
    await writeIndexJson(join(dir, INDEX_FILE_NAME), { metadata: {}, weightMap });

    const { code, summary } = await inspectJson(dir);
    assert.equal(code, 1);
    assert.equal(summary.ok, false);
    assert.deepEqual(
      summary.files.map((f) => [f.file, f.status]),
      [
        [shardName(1, 3), 'ok'],
        [shardName(2, 3), 'ok'],
        [shardName(3, 3), 'invalid'],
        ['model-00004-of-00004.safetensors', 'missing'],
      ],
    );
    assert.deepEqual(
      summary.problems.map((p) => [p.kind, p.code ?? null, p.file ?? null, p.tensor ?? null]),
      [
        ['shard-missing', null, 'model-00004-of-00004.safetensors', null],
        ['file-invalid', 'SAFETENSORS_TRUNCATED', shardName(3, 3), 'lm_head.weight'],
        ['index-tensor-missing', null, shardName(1, 3), 'model.layers.0.ghost.weight'],
        ['index-wrong-shard', null, shardName(1, 3), movedTensor],
        ['tensor-not-indexed', null, shardName(1, 3), 'model.embed_tokens.weight'],
      ],
    );
    // The readable shards still count.
    assert.equal(summary.totals.tensorCount, 10);

    const text = await inspect(dir);
    assert.equal(text.code, 1);
    assert.match(text.out, /5 problems:/);
    assert.match(text.out, /file-invalid {10}SAFETENSORS_TRUNCATED: /);
  });

  test('a single file, and the same file pointed at through a directory without an index', async () => {
    const dir = join(scratch, 'single');
    await mkdir(dir);
    await writeShard(join(dir, 'model.safetensors'), llamaSpecs(1));
    const file = await inspectJson(join(dir, 'model.safetensors'));
    assert.equal(file.code, 0);
    assert.equal(file.summary.index, null);
    assert.deepEqual(file.summary.files[0]?.metadata, { format: 'pt' });
    const viaDir = await inspectJson(dir);
    assert.equal(viaDir.code, 0);
    assert.equal(viaDir.summary.totals.parameters, file.summary.totals.parameters);
  });

  test('without an index, a tensor in two files is a problem', async () => {
    const dir = join(scratch, 'duplicates');
    await mkdir(dir);
    await writeShard(join(dir, 'a.safetensors'), [{ name: 'w', dtype: 'F32', shape: [2] }]);
    await writeShard(join(dir, 'b.safetensors'), [{ name: 'w', dtype: 'F32', shape: [2] }]);
    await writeFile(join(dir, 'notes.txt'), 'not a model file');
    const { code, summary } = await inspectJson(dir);
    assert.equal(code, 1);
    assert.deepEqual(
      summary.problems.map((p) => [p.kind, p.tensor]),
      [['tensor-duplicate', 'w']],
    );
  });

  test('an unreadable index is a problem; the directory is still inspected', async () => {
    const dir = join(scratch, 'bad-index');
    await mkdir(dir);
    await writeShard(join(dir, 'model.safetensors'), llamaSpecs(1));
    await writeFile(join(dir, INDEX_FILE_NAME), '{"weight_map": {"x": "../escape.safetensors"}}');
    const { code, summary } = await inspectJson(dir);
    assert.equal(code, 1);
    assert.deepEqual(
      summary.problems.map((p) => [p.kind, p.code]),
      [['index-invalid', 'INDEX_INVALID']],
    );
    assert.equal(summary.totals.tensorCount, 6);
  });

  test('usage errors exit 2 with a clear message', async () => {
    const missing = await inspect(join(scratch, 'no-such-model'));
    assert.equal(missing.code, 2);
    assert.match(missing.err, /USAGE: .*no-such-model does not exist/);

    const missingJson = await inspect(join(scratch, 'no-such-model'), '--json');
    assert.equal(missingJson.code, 2);
    assert.equal((JSON.parse(missingJson.out) as { error: { code: string } }).error.code, 'USAGE');

    const empty = join(scratch, 'empty');
    await mkdir(empty);
    const nothing = await inspect(empty);
    assert.equal(nothing.code, 2);
    assert.match(nothing.err, /no \.safetensors files/);

    assert.equal((await inspect()).code, 2);
  });
});
