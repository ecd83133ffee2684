/**
 * The pre-shard manifest, pure: for every rank, every output tensor with the file it is in, its
 * dtype, shape, SHA-256 of its bytes, and where it came from (each source tensor, its slice, and the
 * output row it starts at; for an FP8 weight its scale tensor and scheme, for a scale its weight).
 *
 * Encoding is canonical (keys sorted, ranks in order, tensors sorted by name, no times or machine
 * paths), so the same output gives the same bytes. Which part file a tensor lands in follows the
 * order tensors were written; with `--concurrency 1` that order, and so every byte, is reproducible.
 */

import type { Dtype } from '../../format/dtype.js';
import type { PlanArchitecture, TensorSlice } from '../plan/types.js';
import type { OutputEncoding, OutputTensor, PreshardLayout, PreshardQuantisation } from './layout.js';

export const PRESHARD_MANIFEST_FORMAT = 'weightcast-preshard';
export const PRESHARD_MANIFEST_VERSION = 1;

export interface PreshardManifestSource {
  tensor: string;
  file: string;
  dtype: Dtype;
  shape: number[];
  slice: TensorSlice | null;
  /** First output row (dim 0) this source's slice fills. */
  row: number;
}

export interface PreshardManifestTensor {
  name: string;
  file: string;
  dtype: Dtype;
  shape: number[];
  bytes: number;
  sha256: string;
  sources: PreshardManifestSource[];
  /** Zero rows appended after the sources (vocabulary padding). */
  padRows: number;
  encoding: OutputEncoding;
}

export interface PreshardManifestRank {
  rank: number;
  stage: number;
  tpRank: number;
  files: Array<{ path: string; bytes: number }>;
  tensors: PreshardManifestTensor[];
}

export interface PreshardManifest {
  format: typeof PRESHARD_MANIFEST_FORMAT;
  version: typeof PRESHARD_MANIFEST_VERSION;
  architecture: PlanArchitecture;
  tp: number;
  pp: number;
  layout: PreshardLayout;
  quantize: PreshardQuantisation;
  partBytesMax: number;
  /** Non-tensor files copied from the source (config, tokenizer). */
  copied: string[];
  ranks: PreshardManifestRank[];
}

/** What the writer recorded for one output tensor. */
export interface WrittenTensor {
  output: OutputTensor;
  file: string;
  sha256: string;
}

export function manifestTensor(
  written: WrittenTensor,
  sources: ReadonlyMap<string, { file: string; dtype: Dtype; shape: number[] }>,
): PreshardManifestTensor {
  const { output } = written;
  return {
    name: output.name,
    file: written.file,
    dtype: output.dtype,
    shape: [...output.shape],
    bytes: output.bytes,
    sha256: written.sha256,
    sources: output.components.map((component) => {
      const source = sources.get(component.source);
      return {
        tensor: component.source,
        file: source?.file ?? '',
        dtype: source?.dtype ?? output.sourceDtype,
        shape: [...(source?.shape ?? [])],
        slice: component.slice === null ? null : { ...component.slice },
        row: component.row,
      };
    }),
    padRows: output.padRows,
    encoding: { ...output.encoding },
  };
}

/** Canonical bytes: sorted keys, two-space indent, a final newline. */
export function encodePreshardManifest(manifest: PreshardManifest): Buffer {
  const ordered: PreshardManifest = {
    ...manifest,
    copied: [...manifest.copied].sort(),
    ranks: [...manifest.ranks]
      .sort((a, b) => a.rank - b.rank)
      .map((rank) => ({
        ...rank,
        files: [...rank.files].sort((a, b) => compare(a.path, b.path)),
        tensors: [...rank.tensors].sort((a, b) => compare(a.name, b.name)),
      })),
  };
  return Buffer.from(JSON.stringify(sortKeys(ordered), null, 2) + '\n', 'utf8');
}

function sortKeys(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(sortKeys);
  if (value === null || typeof value !== 'object') return value;
  const entries = Object.entries(value as Record<string, unknown>)
    .filter(([, item]) => item !== undefined)
    .sort(([a], [b]) => compare(a, b));
  return Object.fromEntries(entries.map(([key, item]) => [key, sortKeys(item)]));
}

function compare(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}
