/** Temporary directories and small deterministic model-like files for tests. */

import { createHash } from 'node:crypto';
import { mkdtemp, mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { planSafetensorsLayout, SafetensorsFileWriter } from '../../src/format/safetensors-writer.js';
import { buildManifest } from '../../src/manifest/build.js';
import { manifestDigest, writeManifest, type Manifest } from '../../src/manifest/manifest.js';
import { LocalOrigin } from '../../src/origin/local.js';

export async function tempDir(label: string): Promise<{ path: string; cleanup: () => Promise<void> }> {
  const path = await mkdtemp(join(tmpdir(), `weightcast-${label}-`));
  return { path, cleanup: () => rm(path, { recursive: true, force: true }) };
}

/**
 * Collects the process warnings emitted from now until `stop()`: what a fault inside a socket
 * callback says instead of stopping the process. `messages` is filled as they come.
 */
export function captureWarnings(): { messages: string[]; stop: () => void } {
  const messages: string[] = [];
  const onWarning = (warning: Error): void => void messages.push(warning.message);
  process.on('warning', onWarning);
  return { messages, stop: () => process.off('warning', onWarning) };
}

/** Deterministic pseudo-random bytes (SHA-256 in counter mode), so failures replay exactly. */
export function deterministicBytes(seed: string, length: number): Buffer {
  const out = Buffer.alloc(length);
  let offset = 0;
  for (let counter = 0; offset < length; counter++) {
    const block = createHash('sha256').update(`${seed}:${counter}`).digest();
    offset += block.copy(out, offset);
  }
  return out;
}

/** Writes a small model: two safetensors shards, their index, a config and an empty file. Returns total bytes. */
export async function writeSmallModel(dir: string, seed = 'model'): Promise<number> {
  await mkdir(dir, { recursive: true });
  let total = 0;
  const weightMap: Record<string, string> = {};
  for (const [index, rows] of [
    [1, 300],
    [2, 170],
  ] as const) {
    const layout = planSafetensorsLayout([
      { name: `model.layers.${index}.mlp.up_proj.weight`, dtype: 'BF16', shape: [rows, 1024] },
      { name: `model.layers.${index}.input_layernorm.weight`, dtype: 'F32', shape: [1024] },
    ]);
    const shard = `model-0000${index}-of-00002.safetensors`;
    const path = join(dir, shard);
    for (const tensor of layout.tensors) weightMap[tensor.name] = shard;
    const writer = await SafetensorsFileWriter.create(path, layout);
    await writer.write(deterministicBytes(`${seed}:${index}`, layout.fileSize - layout.header.length));
    await writer.close();
    total += layout.fileSize;
  }
  const indexJson = Buffer.from(JSON.stringify({ metadata: { total_size: 0 }, weight_map: weightMap }));
  await writeFile(join(dir, 'model.safetensors.index.json'), indexJson);
  total += indexJson.length;
  const config = Buffer.from(JSON.stringify({ architectures: ['LlamaForCausalLM'], seed }));
  await writeFile(join(dir, 'config.json'), config);
  await mkdir(join(dir, 'sub'), { recursive: true });
  await writeFile(join(dir, 'sub', 'empty.txt'), '');
  return total + config.length;
}

export async function sameFiles(a: string, b: string, paths: readonly string[]): Promise<boolean> {
  for (const path of paths) {
    const [left, right] = await Promise.all([readFile(join(a, path)), readFile(join(b, path))]);
    if (!left.equals(right)) return false;
  }
  return true;
}

export async function writeAt(path: string, bytes: Buffer): Promise<void> {
  await mkdir(dirname(path), { recursive: true });
  await writeFile(path, bytes);
}

/** A small model in `<tmp>/origin`, its manifest, and a destination path `<tmp>/dest` for a pull. */
export async function pullFixture(
  label: string,
  pieceSize: number,
  threads: number,
): Promise<{ root: string; dest: string; manifest: Manifest; cleanup: () => Promise<void> }> {
  const dir = await tempDir(label);
  const root = join(dir.path, 'origin');
  await writeSmallModel(root);
  const local = new LocalOrigin(root);
  const manifest = await buildManifest(local, { pieceSize, threads });
  await local.close();
  return { root, dest: join(dir.path, 'dest'), manifest, cleanup: dir.cleanup };
}

/**
 * The small model at `<dir>/origin` and its manifest (64 KiB pieces) written to
 * `<dir>/manifest.json`: what the swarm's system tests serve, join and pull.
 */
export async function smallModelWithManifest(dir: string): Promise<{
  modelDir: string;
  manifest: Manifest;
  manifestPath: string;
  hex: string;
  paths: string[];
}> {
  const modelDir = join(dir, 'origin');
  await writeSmallModel(modelDir);
  const local = new LocalOrigin(modelDir);
  const manifest = await buildManifest(local, { pieceSize: 64 * 1024 }).finally(() => local.close());
  const manifestPath = join(dir, 'manifest.json');
  await writeManifest(manifestPath, manifest);
  const hex = manifestDigest(manifest).slice('sha256:'.length);
  return { modelDir, manifest, manifestPath, hex, paths: manifest.files.map((file) => file.path) };
}

/** A loopback port nothing listens on: scripts/cluster.ts's, shared with the benchmarks. */
export { freePort } from '../../scripts/cluster.js';
