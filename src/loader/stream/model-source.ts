/**
 * What the loader needs to know about a model before it reads any tensor: its files (with the
 * manifest's piece digests when there is a manifest) and each safetensors file's tensor index.
 *
 * With a manifest, files, sizes, digests and the tensor index all come from it, so nothing read
 * from the origin is used before it is verified. Without one, the origin is listed and each
 * safetensors header is read (two ranged reads) and validated like the reference implementation
 * does: offsets cover the data exactly, sizes match dtypes and shapes. That is all that can be
 * checked without a manifest: the bytes themselves are the origin's, unverified.
 */

import { WeightcastError, assert } from '../../errors.js';
import { readSafetensorsHeader } from '../../format/safetensors.js';
import type { Manifest } from '../../manifest/manifest.js';
import { openOrigin, type OpenOriginOptions } from '../../origin/open.js';
import type { Origin } from '../../origin/origin.js';
import { assertSafeRelativePath } from '../../util/safe-path.js';
import type { ModelFile, TensorInfo } from './types.js';

export interface SafetensorsFileIndex {
  /** Absolute offset of the first tensor byte: the header is [0, dataStart). */
  dataStart: number;
  /** In file order. */
  tensors: TensorInfo[];
  /** The header's `__metadata__`, when the header was read (not with a manifest). */
  metadata: Record<string, string> | null;
}

export interface ModelSource {
  origin: Origin;
  /** True when the origin was opened here and must be closed by `closeModelSource`. */
  ownsOrigin: boolean;
  files: ModelFile[];
  /** Piece size of the digests, when a manifest gives them. */
  pieceSize: number | undefined;
  /** Keyed by file path; only safetensors files. */
  safetensors: Map<string, SafetensorsFileIndex>;
  verified: boolean;
}

export interface OpenModelOptions {
  manifest?: Manifest;
  signal?: AbortSignal;
  origin?: OpenOriginOptions;
}

export async function openModelSource(
  source: string | Origin,
  options: OpenModelOptions = {},
): Promise<ModelSource> {
  const { manifest } = options;
  const files = manifest?.files.map((file) => ({ path: file.path, size: file.size }));
  const ownsOrigin = typeof source === 'string';
  const origin =
    typeof source === 'string'
      ? openOrigin(source, { ...options.origin, ...(files === undefined ? {} : { files }) })
      : source;
  try {
    if (manifest !== undefined) return await fromManifest(origin, ownsOrigin, manifest, options.signal);
    return await fromOrigin(origin, ownsOrigin, options.signal);
  } catch (error) {
    if (ownsOrigin) await origin.close();
    throw error;
  }
}

export async function closeModelSource(model: ModelSource): Promise<void> {
  if (model.ownsOrigin) await model.origin.close();
}

export function isSafetensorsPath(path: string): boolean {
  return path.endsWith('.safetensors');
}

async function fromManifest(
  origin: Origin,
  ownsOrigin: boolean,
  manifest: Manifest,
  signal: AbortSignal | undefined,
): Promise<ModelSource> {
  const safetensors = new Map<string, SafetensorsFileIndex>();
  for (const file of manifest.files) {
    if (!isSafetensorsPath(file.path)) continue;
    if (file.tensors === undefined) {
      // A hand-made manifest without the index: the header is read from the origin. Its bytes are
      // verified later with their pieces whenever a header is requested (hf output), and every
      // tensor byte is verified whatever the header says.
      safetensors.set(file.path, await readIndex(origin, file.path, file.size, signal));
      continue;
    }
    const tensors = [...file.tensors]
      .sort((a, b) => a.start - b.start)
      .map((t) => ({
        file: file.path,
        name: t.name,
        dtype: t.dtype,
        shape: [...t.shape],
        start: t.start,
        end: t.end,
      }));
    safetensors.set(file.path, { dataStart: tensors[0]?.start ?? file.size, tensors, metadata: null });
  }
  return {
    origin,
    ownsOrigin,
    files: manifest.files.map((file) => ({ path: file.path, size: file.size, pieces: file.pieces })),
    pieceSize: manifest.pieceSize,
    safetensors,
    verified: true,
  };
}

async function fromOrigin(
  origin: Origin,
  ownsOrigin: boolean,
  signal: AbortSignal | undefined,
): Promise<ModelSource> {
  const entries = await origin.list(signal === undefined ? {} : { signal });
  const safetensors = new Map<string, SafetensorsFileIndex>();
  for (const entry of entries) {
    assertSafeRelativePath(entry.path, `origin ${origin.location}`);
    if (isSafetensorsPath(entry.path)) {
      safetensors.set(entry.path, await readIndex(origin, entry.path, entry.size, signal));
    }
  }
  return {
    origin,
    ownsOrigin,
    files: entries.map((entry) => ({ path: entry.path, size: entry.size })),
    pieceSize: undefined,
    safetensors,
    verified: false,
  };
}

async function readIndex(
  origin: Origin,
  path: string,
  size: number,
  signal: AbortSignal | undefined,
): Promise<SafetensorsFileIndex> {
  const read = async (offset: number, length: number): Promise<Uint8Array> => {
    const bytes = new Uint8Array(length);
    await origin.readInto(path, offset, bytes, signal === undefined ? {} : { signal });
    return bytes;
  };
  const header = await readSafetensorsHeader(read, size, path, signal === undefined ? {} : { signal });
  const tensors = header.tensors.map((t) => ({
    file: path,
    name: t.name,
    dtype: t.dtype,
    shape: t.shape,
    start: t.start,
    end: t.end,
  }));
  return { dataStart: header.dataStart, tensors, metadata: header.metadata };
}

/** Looks a tensor up by name across the model's files. */
export function findTensor(model: ModelSource, name: string): TensorInfo {
  for (const index of model.safetensors.values()) {
    const found = index.tensors.find((tensor) => tensor.name === name);
    if (found !== undefined) return found;
  }
  throw new WeightcastError('LOADER_INVALID_REQUEST', `the model has no tensor ${JSON.stringify(name)}`, {
    tensor: name,
  });
}

/** The total bytes of the model's files. */
export function modelBytes(model: ModelSource): number {
  const total = model.files.reduce((sum, file) => sum + file.size, 0);
  assert(Number.isSafeInteger(total), 'model size fits in a number');
  return total;
}
