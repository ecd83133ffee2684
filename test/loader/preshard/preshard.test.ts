/**
 * Pre-sharding end to end on tiny synthetic models (Llama, Qwen2-MoE, DeepSeek-V3, and hand-made GQA
 * and FP8 ones): every output tensor is the plan's slice of the source, the fused stack of them, or
 * their FP8 quantisation within FP8 error; files are vLLM sharded_state parts that src/format parses;
 * manifests match the files; parts respect their limit; memory stays within a budget smaller than
 * the model, and a tensor larger than the budget is a typed error.
 */

import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { cp, open, readFile, readdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { isWeightcastError } from '../../../src/errors.js';
import { buildManifest } from '../../../src/manifest/build.js';
import { loadManifest } from '../../../src/manifest/manifest.js';
import { openOrigin } from '../../../src/origin/open.js';
import { verifyDirectory } from '../../../src/manifest/verify.js';
import { OUTPUT_MANIFEST_NAME, PRESHARD_MANIFEST_NAME } from '../../../src/loader/preshard/naming.js';
import {
  preshard,
  type PreshardOptions,
  type PreshardResult,
} from '../../../src/loader/preshard/preshard.js';
import { synthesizeModel } from '../../../src/synth/synth.js';
import { tempDir } from '../../helpers/fixtures.js';
import { deepseekLike, llamaLike, writeTinyModel } from '../plan/helpers.js';
import { checkOutput, readOutput, type CheckResult } from './helpers.js';

let root: { path: string; cleanup: () => Promise<void> };
const dirs = {
  llama: '',
  llamaFp8: '',
  qwen: '',
  deepseek: '',
  deepseekFp8: '',
  gqa: '',
};
let outputs = 0;

before(async () => {
  root = await tempDir('preshard');
  dirs.llama = join(root.path, 'llama');
  // 8 heads of 16, MLP 512, vocab 1000 (padded to 1024), two shards.
  await synthesizeModel({
    dir: dirs.llama,
    arch: 'llama',
    hidden: 128,
    heads: 8,
    layers: 2,
    vocab: 1000,
    shards: 2,
    seed: 1,
  });
  dirs.llamaFp8 = join(root.path, 'llama-fp8');
  await synthesizeModel({
    dir: dirs.llamaFp8,
    arch: 'llama',
    dtype: 'f8_e4m3',
    hidden: 128,
    heads: 8,
    layers: 2,
    vocab: 1000,
    seed: 2,
  });
  dirs.qwen = join(root.path, 'qwen');
  await synthesizeModel({
    dir: dirs.qwen,
    arch: 'qwen2-moe',
    hidden: 128,
    layers: 2,
    experts: 4,
    vocab: 500,
    seed: 3,
  });
  dirs.deepseek = join(root.path, 'deepseek');
  await synthesizeModel({
    dir: dirs.deepseek,
    arch: 'deepseek-v3',
    hidden: 256,
    layers: 2,
    experts: 4,
    vocab: 500,
    seed: 4,
  });
  // DeepSeek-style block FP8 with every slice on 128-row blocks at tp 2.
  dirs.deepseekFp8 = join(root.path, 'deepseek-fp8');
  await writeTinyModel(
    dirs.deepseekFp8,
    deepseekLike({
      layers: 2,
      firstDense: 1,
      hidden: 128,
      heads: 8,
      nope: 64,
      rope: 64,
      v: 128,
      qLora: 128,
      kvLora: 128,
      intermediate: 512,
      moeIntermediate: 512,
      experts: 4,
      vocab: 300,
      fp8Block: true,
    }),
  );
  // GQA (8 query heads, 2 KV heads) with q/k/v biases; its tensors alternate between two shards, so
  // fused parts sit in different files.
  dirs.gqa = join(root.path, 'gqa');
  await writeTinyModel(
    dirs.gqa,
    llamaLike({
      modelType: 'qwen2',
      layers: 2,
      hidden: 64,
      heads: 8,
      kvHeads: 2,
      headDim: 8,
      intermediate: 192,
      vocab: 300,
      bias: true,
    }),
  );
});

after(async () => {
  await root.cleanup();
});

async function run(
  source: string,
  options: PreshardOptions,
): Promise<{ result: PreshardResult; to: string }> {
  const to = join(root.path, `out-${outputs++}`);
  return { result: await preshard(source, to, { memoryBytes: 16 * 1024 * 1024, ...options }), to };
}

async function check(
  source: string,
  options: PreshardOptions,
): Promise<CheckResult & { result: PreshardResult; to: string }> {
  const { result, to } = await run(source, options);
  const output = await readOutput(to);
  const checked = await checkOutput(source, output, {
    tp: options.tp,
    ...(options.pp === undefined ? {} : { pp: options.pp }),
  });
  return { ...checked, result, to };
}

test('llama, hf layout, tp 1, 2, 4 and tp 2 x pp 2: every output tensor is the plan slice, files verify', async () => {
  for (const [tp, pp] of [
    [1, 1],
    [2, 1],
    [4, 1],
    [2, 2],
  ] as const) {
    const { result, to, outputs: count } = await check(dirs.llama, { tp, pp });
    assert.equal(result.ranks.length, tp * pp);
    assert.ok(count > 0);
    assert.equal(result.bytesRead, result.sourceBytes, 'each source tensor read once');
    // Config and tokenizer files are copied unchanged.
    for (const name of ['config.json', 'tokenizer.json', 'tokenizer_config.json', 'generation_config.json']) {
      assert.deepEqual(await readFile(join(to, name)), await readFile(join(dirs.llama, name)), name);
    }
    const manifest = await loadManifest(join(to, OUTPUT_MANIFEST_NAME));
    const report = await verifyDirectory(to, manifest);
    assert.ok(report.ok, 'the output directory verifies against its weightcast manifest');
    assert.ok(manifest.files.some((file) => file.path === PRESHARD_MANIFEST_NAME));
  }
});

test('llama, vllm layout with fp8: fused qkv_proj / gate_up_proj, padded vocabulary, one scale per weight on every rank', async () => {
  const { result, to, fused, quantised, padded } = await check(dirs.llama, {
    tp: 2,
    layout: 'vllm',
    quantize: 'fp8',
  });
  assert.ok(fused >= 4 * 2, 'qkv_proj and gate_up_proj on both ranks, both layers');
  assert.ok(quantised > 0);
  assert.ok(padded > 0, 'the last rank pads embed_tokens and lm_head to 512 rows');
  const output = await readOutput(to);
  const names = [...(output.ranks[0]?.keys() ?? [])];
  assert.ok(names.includes('model.layers.0.self_attn.qkv_proj.weight'));
  assert.ok(names.includes('model.layers.1.mlp.gate_up_proj.weight_scale'));
  assert.ok(!names.some((name) => /\.(q|k|v|gate|up)_proj\./.test(name)));
  assert.deepEqual(output.ranks[1]?.get('lm_head.weight')?.shape, [512, 128]);
  assert.equal(output.ranks[0]?.get('model.embed_tokens.weight')?.dtype, 'BF16', 'embeddings stay BF16');
  assert.equal(
    output.ranks[0]?.get('model.layers.0.input_layernorm.weight')?.dtype,
    'BF16',
    'norms stay BF16',
  );
  for (const name of names.filter((candidate) => candidate.endsWith('weight_scale'))) {
    assert.deepEqual(
      output.ranks[0]?.get(name)?.bytes,
      output.ranks[1]?.get(name)?.bytes,
      `${name} on both ranks`,
    );
  }
  const config = JSON.parse(await readFile(join(to, 'config.json'), 'utf8')) as Record<string, unknown>;
  assert.deepEqual(config['quantization_config'], { activation_scheme: 'dynamic', quant_method: 'fp8' });
  assert.equal(result.stagedUnits, 0);
});

test('qwen2-moe: vllm fuses attention (biases too) and the shared expert, leaves routed experts; hf with fp8', async () => {
  const fusedRun = await check(dirs.qwen, { tp: 2, layout: 'vllm' });
  const output = await readOutput(fusedRun.to);
  const names = [...(output.ranks[1]?.keys() ?? [])];
  assert.ok(names.includes('model.layers.0.self_attn.qkv_proj.bias'));
  assert.ok(names.includes('model.layers.0.mlp.shared_expert.gate_up_proj.weight'));
  assert.ok(names.includes('model.layers.0.mlp.experts.3.gate_proj.weight'));
  const quantisedRun = await check(dirs.qwen, { tp: 2, quantize: 'fp8' });
  assert.ok(quantisedRun.quantised > 0);
  const quantised = await readOutput(quantisedRun.to);
  assert.equal(quantised.ranks[0]?.get('model.layers.0.mlp.gate.weight')?.dtype, 'BF16', 'the router stays');
  assert.equal(quantised.ranks[0]?.get('model.layers.0.mlp.shared_expert_gate.weight')?.dtype, 'BF16');
  assert.equal(quantised.ranks[0]?.get('model.layers.0.self_attn.q_proj.bias')?.dtype, 'BF16', 'biases stay');
  assert.equal(quantised.ranks[0]?.get('model.layers.0.mlp.experts.0.up_proj.weight')?.dtype, 'F8_E4M3');
});

test('deepseek-v3: hf slices, fp8 with 128x128 block scales, and vllm layout refused', async () => {
  await check(dirs.deepseek, { tp: 2 });
  const quantisedRun = await check(dirs.deepseek, { tp: 2, quantize: 'fp8' });
  assert.ok(quantisedRun.quantised > 0);
  const output = await readOutput(quantisedRun.to);
  // q_b_proj: 4 heads of 96 rows over 2 ranks is 192 x 64 per rank: 2 x 1 blocks.
  assert.deepEqual(output.ranks[0]?.get('model.layers.0.self_attn.q_b_proj.weight_scale_inv')?.shape, [2, 1]);
  assert.equal(output.ranks[0]?.get('model.layers.0.mlp.gate.e_score_correction_bias')?.dtype, 'F32');
  const config = JSON.parse(await readFile(join(quantisedRun.to, 'config.json'), 'utf8')) as Record<
    string,
    unknown
  >;
  assert.deepEqual(
    (config['quantization_config'] as Record<string, unknown>)['weight_block_size'],
    [128, 128],
  );
  await assert.rejects(run(dirs.deepseek, { tp: 2, layout: 'vllm' }), (error) =>
    isWeightcastError(error, 'PRESHARD_UNSUPPORTED'),
  );
});

test('already-FP8 checkpoints: weights and their scales are sliced as they are, never requantised', async () => {
  const block = await check(dirs.deepseekFp8, { tp: 2, quantize: 'fp8' });
  assert.equal(block.quantised, 0);
  const output = await readOutput(block.to);
  assert.equal(output.ranks[1]?.get('model.layers.1.self_attn.q_b_proj.weight')?.dtype, 'F8_E4M3');
  assert.ok(output.ranks[1]?.has('model.layers.1.self_attn.q_b_proj.weight_scale_inv'));
  const perTensor = await check(dirs.llamaFp8, { tp: 2, quantize: 'fp8' });
  assert.equal(perTensor.quantised, 0);
  await assert.rejects(run(dirs.llamaFp8, { tp: 2, layout: 'vllm' }), (error) =>
    isWeightcastError(error, 'PRESHARD_UNSUPPORTED'),
  );
});

test('GQA with KV heads replicated at tp 4, fused parts in different files: staged units', async () => {
  const plain = await check(dirs.gqa, { tp: 4 });
  assert.equal(plain.result.stagedUnits, 0);
  const fused = await check(dirs.gqa, { tp: 4, layout: 'vllm', quantize: 'fp8' });
  assert.ok(fused.result.stagedUnits > 0, 'q, k and v alternate between the shards');
  assert.ok(fused.fused > 0 && fused.quantised > 0);
  const output = await readOutput(fused.to);
  // 2 query heads of 8 and one (replicated) KV head each for k and v: 32 rows on every rank.
  assert.deepEqual(output.ranks[3]?.get('model.layers.1.self_attn.qkv_proj.weight')?.shape, [32, 64]);
  assert.deepEqual(output.ranks[3]?.get('model.layers.1.self_attn.qkv_proj.bias')?.shape, [32]);
});

test('parts: a new part before the limit would be exceeded; tensors never split', async () => {
  const partBytesMax = 64 * 1024;
  const { to, result } = await check(dirs.llama, { tp: 2, partBytesMax });
  const output = await readOutput(to);
  for (const [rank, parts] of output.parts.entries()) {
    assert.ok(parts.length > 2, `rank ${rank} has several parts`);
    for (const part of parts) {
      assert.ok(
        part.dataBytes <= partBytesMax || part.tensors === 1,
        `${part.file}: ${part.dataBytes} bytes`,
      );
    }
  }
  assert.equal(result.ranks[0]?.files.length, output.parts[0]?.length);
});

test('memory: a budget smaller than the model completes within it; a tensor over the budget is a typed error', async () => {
  // The model is 1.5 MiB; its largest tensors (embed_tokens, lm_head) are 250 KiB each.
  const memoryBytes = 640 * 1024;
  const { result } = await check(dirs.llama, { tp: 2, layout: 'vllm', quantize: 'fp8', memoryBytes });
  assert.ok(result.sourceBytes > 2 * memoryBytes);
  assert.ok(result.residentBytesPeak <= memoryBytes, `${result.residentBytesPeak} within ${memoryBytes}`);
  const to = join(root.path, 'too-small');
  await assert.rejects(preshard(dirs.llama, to, { tp: 2, memoryBytes: 200 * 1024 }), (error) =>
    isWeightcastError(error, 'LOADER_TENSOR_TOO_LARGE'),
  );
  const left = await readdir(to).catch(() => []);
  assert.deepEqual(left, [], 'nothing written');
});

test('concurrency 1 is reproducible byte for byte; a second run overwrites an earlier output', async () => {
  const first = await run(dirs.qwen, { tp: 2, concurrency: 1, quantize: 'fp8' });
  const second = await run(dirs.qwen, { tp: 2, concurrency: 1, quantize: 'fp8' });
  assert.deepEqual(
    await readFile(join(first.to, PRESHARD_MANIFEST_NAME)),
    await readFile(join(second.to, PRESHARD_MANIFEST_NAME)),
  );
  assert.equal(first.result.outputManifestDigest, second.result.outputManifestDigest);
  // Overwriting with fewer ranks removes the earlier ranks' files.
  await preshard(dirs.qwen, first.to, { tp: 1 });
  const names = (await readdir(first.to)).filter((name) => name.startsWith('model-rank-'));
  assert.deepEqual(names, ['model-rank-0-part-0.safetensors']);
  await readOutput(first.to);
});

test('an aborted run leaves no rank file under its final name', async () => {
  const controller = new AbortController();
  const to = join(root.path, 'aborted');
  const pending = preshard(dirs.deepseek, to, {
    tp: 2,
    quantize: 'fp8',
    signal: controller.signal,
    onProgress: () => controller.abort(new Error('stop')),
  });
  // The read stream under pre-sharding is the loader's: its abort must not say "the load".
  await assert.rejects(
    pending,
    (error) => isWeightcastError(error, 'ABORTED') && !error.message.includes('the load'),
  );
  const names = await readdir(to);
  assert.ok(!names.some((name) => name.startsWith('model-rank-')), names.join(', '));
  await writeFile(join(to, 'stray.txt'), 'x');
  await assert.rejects(preshard(dirs.deepseek, to, { tp: 2 }), (error) =>
    isWeightcastError(error, 'PRESHARD_DESTINATION_CONFLICT'),
  );
});

test('with the source manifest every byte is verified; a corrupt byte fails with PIECE_HASH_MISMATCH', async () => {
  const origin = openOrigin(dirs.qwen);
  const manifest = await buildManifest(origin, { pieceSize: 64 * 1024 });
  await origin.close();
  const verified = await check(dirs.qwen, {
    tp: 2,
    layout: 'vllm',
    quantize: 'fp8',
    manifest,
    memoryBytes: 1024 * 1024,
  });
  assert.ok(verified.result.verified);
  assert.ok(verified.result.piecesVerified > 0);
  assert.ok(verified.result.residentBytesPeak <= 1024 * 1024);
  const corrupt = join(root.path, 'qwen-corrupt');
  await cp(dirs.qwen, corrupt, { recursive: true });
  const shard = (await readdir(corrupt)).find((name) => name.endsWith('.safetensors'));
  assert.ok(shard);
  const handle = await open(join(corrupt, shard), 'r+');
  const { size } = await handle.stat();
  await handle.write(Buffer.from([0x5a]), 0, 1, size - 100);
  await handle.close();
  await assert.rejects(preshard(corrupt, join(root.path, 'from-corrupt'), { tp: 2, manifest }), (error) =>
    isWeightcastError(error, 'PIECE_HASH_MISMATCH'),
  );
});
