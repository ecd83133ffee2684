/**
 * Checks for pre-sharded output: reads every rank's part files with src/format's parser, checks them
 * against the pre-shard manifest (names, files, SHA-256), and checks every output tensor against the
 * source: the plan's slice exactly, the stacked slices of a fused tensor, zero padding, or for FP8
 * weights the exact codes of float32(w / scale) from an independent encoder, scales from an
 * independent amax, and dequantised values within FP8 error.
 */

import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { readFile, readdir } from 'node:fs/promises';
import { join } from 'node:path';
import type { Dtype } from '../../../src/format/dtype.js';
import { parseSafetensorsBuffer } from '../../../src/format/safetensors.js';
import { buildParallelPlan } from '../../../src/loader/plan/build.js';
import { readModelDirectory } from '../../../src/loader/plan/files.js';
import type { ParallelPlan } from '../../../src/loader/plan/types.js';
import type { PreshardManifest, PreshardManifestTensor } from '../../../src/loader/preshard/manifest.js';
import { PRESHARD_MANIFEST_NAME, RANK_PART_PATTERN } from '../../../src/loader/preshard/naming.js';
import { decodeBf16, decodeE4m3, decodeF16, encodeE4m3 } from '../../../src/format/float-bits.js';
import { loadAllTensors, referenceSlice, type LoadedTensor } from '../plan/helpers.js';

export interface OutputTensorBytes {
  dtype: Dtype;
  shape: number[];
  bytes: Buffer;
  file: string;
}

export interface PreshardOutput {
  manifest: PreshardManifest;
  /** Per rank: tensor name to bytes as stored. */
  ranks: Array<Map<string, OutputTensorBytes>>;
  /** Per rank: part files with their tensor data bytes. */
  parts: Array<Array<{ file: string; dataBytes: number; tensors: number }>>;
}

/** Parses every part file and checks it against the manifest: same tensors, files and SHA-256. */
export async function readOutput(dir: string): Promise<PreshardOutput> {
  const manifest = JSON.parse(await readFile(join(dir, PRESHARD_MANIFEST_NAME), 'utf8')) as PreshardManifest;
  const numbers = (name: string): number[] => (RANK_PART_PATTERN.exec(name) ?? []).slice(1).map(Number);
  const names = (await readdir(dir))
    .filter((name) => RANK_PART_PATTERN.test(name))
    .sort((a, b) => {
      const [rankA = 0, partA = 0] = numbers(a);
      const [rankB = 0, partB = 0] = numbers(b);
      return rankA - rankB || partA - partB;
    });
  assert.ok(!names.some((name) => name.endsWith('.weightcast-partial')), 'no partial files left');
  const ranks = manifest.ranks.map(() => new Map<string, OutputTensorBytes>());
  const parts: PreshardOutput['parts'] = manifest.ranks.map(() => []);
  for (const name of names) {
    const [, rankText, partText] = RANK_PART_PATTERN.exec(name) ?? [];
    const rank = Number(rankText);
    const buffer = await readFile(join(dir, name));
    const header = parseSafetensorsBuffer(buffer, name);
    const tensors = ranks[rank];
    assert.ok(tensors, `${name} belongs to a rank of the manifest`);
    for (const entry of header.tensors) {
      tensors.set(entry.name, {
        dtype: entry.dtype,
        shape: entry.shape,
        bytes: buffer.subarray(entry.start, entry.end),
        file: name,
      });
    }
    const dataBytes = header.tensors.reduce((total, entry) => total + entry.end - entry.start, 0);
    parts[rank]?.push({ file: name, dataBytes, tensors: header.tensors.length });
    assert.ok(Number(partText) < names.length, 'part numbers start at 0');
  }
  for (const [index, rank] of manifest.ranks.entries()) {
    const stored = ranks[index] ?? new Map<string, OutputTensorBytes>();
    assert.equal(rank.rank, index);
    assert.deepEqual(
      rank.files.map((file) => file.path).sort(),
      (parts[index] ?? []).map((part) => part.file).sort(),
      `rank ${index}: manifest files are the part files`,
    );
    assert.deepEqual(
      (parts[index] ?? []).map((part) => part.file),
      (parts[index] ?? []).map((_, part) => `model-rank-${index}-part-${part}.safetensors`),
      `rank ${index}: parts numbered from 0 without gaps`,
    );
    assert.equal(stored.size, rank.tensors.length, `rank ${index}: every stored tensor is in the manifest`);
    for (const tensor of rank.tensors) {
      const found = stored.get(tensor.name);
      assert.ok(found, `rank ${index}: ${tensor.name} is stored`);
      assert.equal(found.file, tensor.file, `rank ${index}: ${tensor.name} file`);
      assert.equal(found.dtype, tensor.dtype);
      assert.deepEqual(found.shape, tensor.shape);
      assert.equal(
        createHash('sha256').update(found.bytes).digest('hex'),
        tensor.sha256,
        `${tensor.name} hash`,
      );
    }
  }
  return { manifest, ranks, parts };
}

/** float values of a float tensor's bytes (BF16, F16, F32). */
export function floatValues(dtype: Dtype, bytes: Uint8Array): number[] {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const values: number[] = [];
  if (dtype === 'F32') for (let at = 0; at < bytes.length; at += 4) values.push(view.getFloat32(at, true));
  else if (dtype === 'BF16')
    for (let at = 0; at < bytes.length; at += 2) values.push(decodeBf16(view.getUint16(at, true)));
  else if (dtype === 'F16')
    for (let at = 0; at < bytes.length; at += 2) values.push(decodeF16(view.getUint16(at, true)));
  else assert.fail(`not a float dtype: ${dtype}`);
  return values;
}

export interface CheckResult {
  outputs: number;
  fused: number;
  quantised: number;
  padded: number;
}

/**
 * Every output tensor against the source and an independently built plan: its sources are the plan's
 * slices of this rank, and its bytes are those slices (stacked, padded) or their FP8 quantisation.
 */
export async function checkOutput(
  sourceDir: string,
  output: PreshardOutput,
  options: { tp: number; pp?: number },
): Promise<CheckResult> {
  const { tensors } = await loadAllTensors(sourceDir);
  const plan = buildParallelPlan(await readModelDirectory(sourceDir), {
    tp: options.tp,
    pp: options.pp ?? 1,
  });
  assert.equal(output.manifest.ranks.length, plan.ranks.length);
  const result: CheckResult = { outputs: 0, fused: 0, quantised: 0, padded: 0 };
  for (const rank of output.manifest.ranks) {
    const stored = output.ranks[rank.rank] ?? new Map<string, OutputTensorBytes>();
    checkCoverage(plan, rank.rank, rank.tensors);
    const byName = new Map(rank.tensors.map((tensor) => [tensor.name, tensor]));
    for (const tensor of rank.tensors) {
      result.outputs++;
      const bytes = stored.get(tensor.name)?.bytes;
      assert.ok(bytes);
      const slices = tensor.sources.map((source) => {
        const full = tensors.get(source.tensor);
        assert.ok(full, `${source.tensor} is in the source`);
        return { full, bytes: referenceSlice(full, source.slice) };
      });
      if (tensor.sources.length > 1) result.fused++;
      if (tensor.padRows > 0) result.padded++;
      if (tensor.encoding.kind === 'copy') {
        const first = slices[0]?.full;
        const rowBytes = first === undefined ? 0 : first.bytes.length / (first.shape[0] ?? 1);
        const expected = Buffer.concat([
          ...slices.map((slice) => slice.bytes),
          Buffer.alloc(Math.round(tensor.padRows * rowBytes)),
        ]);
        assert.ok(bytes.equals(expected), `rank ${rank.rank}: ${tensor.name} bytes are the plan's slices`);
      } else if (tensor.encoding.kind === 'fp8') {
        result.quantised++;
        const scaleEntry = byName.get(tensor.encoding.scale);
        const scaleBytes = stored.get(tensor.encoding.scale)?.bytes;
        assert.ok(scaleEntry && scaleBytes, `${tensor.name} has its scale ${tensor.encoding.scale}`);
        assert.equal(scaleEntry.encoding.kind, 'fp8-scale');
        checkFp8(tensor, bytes, scaleBytes, slices);
      } else {
        assert.equal(
          byName.get(tensor.encoding.weight)?.encoding.kind,
          'fp8',
          `${tensor.name} scales an FP8 weight`,
        );
      }
    }
  }
  return result;
}

/** Each of the plan's tensors for this rank is a source of exactly one output, with the plan's slice. */
function checkCoverage(plan: ParallelPlan, rank: number, outputs: readonly PreshardManifestTensor[]): void {
  const planned = new Map((plan.ranks[rank]?.tensors ?? []).map((tensor) => [tensor.name, tensor]));
  const seen = new Set<string>();
  for (const output of outputs) {
    if (output.encoding.kind === 'fp8-scale') continue;
    for (const source of output.sources) {
      const held = planned.get(source.tensor);
      assert.ok(held, `rank ${rank}: ${source.tensor} is in the plan`);
      assert.deepEqual(source.slice, held.slice, `rank ${rank}: ${source.tensor} slice`);
      assert.ok(!seen.has(source.tensor), `rank ${rank}: ${source.tensor} used once`);
      seen.add(source.tensor);
    }
  }
  assert.equal(seen.size, planned.size, `rank ${rank}: every planned tensor is written`);
}

function checkFp8(
  tensor: PreshardManifestTensor,
  codes: Buffer,
  scaleBytes: Buffer,
  slices: Array<{ full: LoadedTensor; bytes: Buffer }>,
): void {
  const scaleView = new DataView(scaleBytes.buffer, scaleBytes.byteOffset, scaleBytes.byteLength);
  const values = slices.flatMap((slice) => floatValues(slice.full.dtype, slice.bytes));
  const [rows = 0, columns = 0] = tensor.shape;
  assert.equal(values.length, rows * columns);
  let scaleOf: (index: number) => number;
  if (tensor.encoding.kind === 'fp8' && tensor.encoding.scheme === 'per-tensor') {
    // The whole source tensors' amax (the largest of the parts' for a fused tensor): the same on every rank.
    const amax = Math.max(...slices.map((slice) => finiteAmax(slice.full)));
    const scale = scaleView.getFloat32(0, true);
    assert.equal(scale, Math.fround(amax / 448), `${tensor.name} per-tensor scale`);
    scaleOf = () => scale;
  } else {
    const blockColumns = Math.ceil(columns / 128);
    scaleOf = (index) =>
      scaleView.getFloat32(
        (Math.floor(Math.floor(index / columns) / 128) * blockColumns + Math.floor((index % columns) / 128)) *
          4,
        true,
      );
  }
  for (let index = 0; index < values.length; index++) {
    const value = values[index] ?? 0;
    const scale = scaleOf(index);
    if (Number.isNaN(value)) {
      assert.equal((codes[index] ?? 0) & 0x7f, 0x7f, `${tensor.name}[${index}]: NaN stays NaN`);
      continue;
    }
    if (!Number.isFinite(value)) {
      assert.equal(codes[index], value > 0 ? 0x7e : 0xfe, `${tensor.name}[${index}]: infinity saturates`);
      continue;
    }
    assert.equal(codes[index], encodeE4m3(Math.fround(value / scale)), `${tensor.name}[${index}] code`);
    const restored = decodeE4m3(codes[index] ?? 0) * scale;
    assert.ok(
      Math.abs(restored - value) <= Math.abs(value) * 2 ** -4 + scale * 2 ** -10,
      `${tensor.name}[${index}]: ${restored} vs ${value}`,
    );
  }
}

const amaxCache = new WeakMap<LoadedTensor, number>();

/** The largest finite magnitude of a whole tensor; NaN and infinities (random test bytes hold both) do not count. */
function finiteAmax(tensor: LoadedTensor): number {
  let amax = amaxCache.get(tensor);
  if (amax === undefined) {
    amax = 0;
    for (const value of floatValues(tensor.dtype, tensor.bytes)) {
      if (Number.isFinite(value)) amax = Math.max(amax, Math.abs(value));
    }
    amaxCache.set(tensor, amax);
  }
  return amax;
}
