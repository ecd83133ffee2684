/**
 * Fixtures for slice-aware fetch: tiny models of each architecture (llama with GQA and a vocabulary
 * that does not fill its padding, qwen2-moe from the synthesiser, deepseek-v3 with latent attention
 * and experts), their model manifest and plan manifests, and a reader of what a rank load wrote, in
 * any of the three formats, back into tensors by name.
 */

import { readFile, readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { parseSafetensorsBuffer } from '../../../src/format/safetensors.js';
import { buildParallelPlan } from '../../../src/loader/plan/build.js';
import { buildPlanManifest, readModelDirectory } from '../../../src/loader/plan/files.js';
import type { PlanManifest } from '../../../src/loader/plan/plan-manifest.js';
import type { ParallelismOptions } from '../../../src/loader/plan/types.js';
import { buildManifest } from '../../../src/manifest/build.js';
import type { Manifest } from '../../../src/manifest/manifest.js';
import { LocalOrigin } from '../../../src/origin/local.js';
import { synthesizeModel } from '../../../src/synth/synth.js';
import { deepseekLike, llamaLike, writeTinyModel, type LoadedTensor } from '../plan/helpers.js';

export const PIECE_BYTES = 64 * 1024;

export type Arch = 'llama' | 'qwen2-moe' | 'deepseek-v3';

/** Writes a tiny model of `arch` into `dir` (each well under 2 MiB, tp 8 divides everything needed). */
export async function writeArchModel(dir: string, arch: Arch): Promise<void> {
  if (arch === 'llama') {
    const model = llamaLike({
      modelType: 'llama',
      layers: 2,
      hidden: 128,
      heads: 8,
      kvHeads: 2,
      headDim: 16,
      intermediate: 256,
      vocab: 1000,
    });
    await writeTinyModel(dir, model, 'slice-llama');
    return;
  }
  if (arch === 'deepseek-v3') {
    const model = deepseekLike({
      layers: 2,
      firstDense: 1,
      hidden: 128,
      heads: 8,
      nope: 16,
      rope: 8,
      v: 16,
      qLora: 64,
      kvLora: 32,
      intermediate: 256,
      moeIntermediate: 64,
      experts: 8,
      vocab: 512,
      fp8Block: false,
    });
    await writeTinyModel(dir, model, 'slice-deepseek');
    return;
  }
  await synthesizeModel({
    dir,
    arch: 'qwen2-moe',
    dtype: 'bf16',
    layers: 2,
    hidden: 128,
    heads: 8,
    experts: 8,
    vocab: 512,
    shards: 2,
    seed: 5,
  });
}

export async function modelManifest(dir: string, pieceSize = PIECE_BYTES): Promise<Manifest> {
  const origin = new LocalOrigin(dir);
  try {
    return await buildManifest(origin, { pieceSize, threads: 1 });
  } finally {
    await origin.close();
  }
}

export async function planManifestFor(dir: string, options: ParallelismOptions): Promise<PlanManifest> {
  const source = await readModelDirectory(dir);
  return buildPlanManifest(source, buildParallelPlan(source, options));
}

/** Every tensor a rank load wrote into `dir` (every *.safetensors file in it), by name. */
export async function readOutputTensors(dir: string): Promise<Map<string, LoadedTensor & { file: string }>> {
  const tensors = new Map<string, LoadedTensor & { file: string }>();
  for (const name of (await readdir(dir)).sort()) {
    if (!name.endsWith('.safetensors')) continue;
    const buffer = await readFile(join(dir, name));
    for (const entry of parseSafetensorsBuffer(buffer, name).tensors) {
      if (tensors.has(entry.name)) throw new Error(`${entry.name} is written twice`);
      tensors.set(entry.name, {
        file: name,
        dtype: entry.dtype,
        shape: entry.shape,
        bytes: buffer.subarray(entry.start, entry.end),
      });
    }
  }
  return tensors;
}
