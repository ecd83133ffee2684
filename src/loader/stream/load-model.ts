/**
 * The whole-model load: every tensor of a model streamed from its origin into an output, verified
 * against the manifest when there is one, within a memory budget. `weightcast load` (without
 * `--tp`) and `bench:load` both call it.
 *
 * How data moves: open the model (files and tensor index from the manifest, or the origin's listing
 * and headers); for `hf`, refuse a destination holding model files this model would not replace
 * (they would make a mix of two models; format/model-directory.ts); open the read stream (a budget
 * too small for the largest part fails before any file is created), then the output (`hf`: the
 * original files byte for byte; `shm`: aligned safetensors files, by default under
 * /dev/shm/weightcast). Each delivered part is written before the next is asked for; the output
 * renames its files into place only when every byte is in, and removes its partial files on any
 * failure.
 */

import { refuseStaleModelFiles } from '../../format/model-directory-file.js';
import type { Manifest } from '../../manifest/manifest.js';
import type { OpenOriginOptions } from '../../origin/open.js';
import type { Origin } from '../../origin/origin.js';
import { HF_REQUESTS, HfOutput } from './hf-output.js';
import { openLoadStream } from './load.js';
import { closeModelSource, modelBytes, openModelSource, type ModelSource } from './model-source.js';
import { MEMORY_BYTES_DEFAULT } from './read-stream.js';
import { SHM_REQUESTS, ShmOutput } from './shm-output.js';

const MiB = 1024 * 1024;
/** Largest piece of a tensor handled at once: no buffer needs the largest tensor's size. */
export const PART_BYTES_DEFAULT = 16 * MiB;

export type ModelFormat = 'hf' | 'shm';

export type LoadModelEvent =
  /** The model is open: whether its bytes will be verified, and how much there is to read. */
  | { type: 'opened'; verified: boolean; files: number; bytes: number }
  | { type: 'progress'; bytesDelivered: number; bytesTotal: number };

export interface LoadModelOptions {
  to: string;
  format: ModelFormat;
  /** Verify every piece against this manifest; without it the bytes are the origin's, trusted. */
  manifest?: Manifest;
  /** How to open `source` when it is a string (ignored for an Origin). */
  origin?: OpenOriginOptions;
  memoryBytes?: number;
  concurrency?: number;
  /**
   * Tensors larger than this arrive in parts (rounded up to whole pieces when verifying), so the
   * budget need not hold the largest tensor. Default 16 MiB.
   */
  partBytes?: number;
  signal?: AbortSignal;
  onEvent?: (event: LoadModelEvent) => void;
}

export interface LoadModelResult {
  format: ModelFormat;
  to: string;
  verified: boolean;
  files: number;
  tensors: number;
  /** Bytes of tensor data delivered. */
  tensorBytes: number;
  /** The model's bytes (every file). */
  bytes: number;
  /** Bytes read from the origin (whole pieces when verifying; retries included). */
  bytesRead: number;
  bytesCopied: number;
  piecesVerified: number;
  piecesRejected: number;
  seconds: number;
  memoryBytes: number;
  /** The most the loader's buffers held at once. */
  residentBytesPeak: number;
}

/** Loads every tensor of `source` (a path, a URL or an open Origin) into `options.to`. */
export async function loadModel(
  source: string | Origin,
  options: LoadModelOptions,
): Promise<LoadModelResult> {
  const started = performance.now();
  const model = await openModelSource(source, {
    ...(options.manifest === undefined ? {} : { manifest: options.manifest }),
    ...(options.origin === undefined ? {} : { origin: options.origin }),
    ...(options.signal === undefined ? {} : { signal: options.signal }),
  });
  try {
    // Both formats write the source's file names: another model's shards left beside them would
    // be read with them (a reader that globs *.safetensors, in shared memory as on disk).
    await refuseStaleModelFiles(
      options.to,
      model.files.map((file) => file.path),
    );
    options.onEvent?.({
      type: 'opened',
      verified: model.verified,
      files: model.files.length,
      bytes: modelBytes(model),
    });
    return await streamInto(model, options, started);
  } finally {
    await closeModelSource(model);
  }
}

async function streamInto(
  model: ModelSource,
  options: LoadModelOptions,
  started: number,
): Promise<LoadModelResult> {
  const memoryBytes = options.memoryBytes ?? MEMORY_BYTES_DEFAULT;
  const partBytes = wholePieces(options.partBytes ?? PART_BYTES_DEFAULT, model.pieceSize);
  const stream = openLoadStream(model, options.format === 'hf' ? HF_REQUESTS : SHM_REQUESTS, {
    memoryBytes,
    partBytes,
    ...(options.concurrency === undefined ? {} : { concurrency: options.concurrency }),
    ...(options.signal === undefined ? {} : { signal: options.signal }),
  });
  const output =
    options.format === 'hf'
      ? await HfOutput.create(options.to, model)
      : await ShmOutput.create(options.to, model);
  const bytesTotal = stream.plan.bytesRequested;
  let tensors = 0;
  let tensorBytes = 0;
  try {
    for await (const delivered of stream) {
      await output.write(delivered);
      const lastPart = delivered.part === undefined || delivered.part.last;
      if (delivered.request.tag.kind === 'tensor') {
        tensorBytes += delivered.bytes.length;
        if (lastPart) tensors++;
      }
      options.onEvent?.({ type: 'progress', bytesDelivered: stream.stats.bytesDelivered, bytesTotal });
    }
    await output.finish();
  } catch (error) {
    await output.abandon();
    throw error;
  }
  return {
    format: options.format,
    to: options.to,
    verified: model.verified,
    files: model.files.length,
    tensors,
    tensorBytes,
    bytes: modelBytes(model),
    bytesRead: stream.stats.bytesRead,
    bytesCopied: stream.stats.bytesCopied,
    piecesVerified: stream.stats.piecesVerified,
    piecesRejected: stream.stats.piecesRejected,
    seconds: (performance.now() - started) / 1000,
    memoryBytes,
    residentBytesPeak: stream.stats.residentBytesPeak,
  };
}

/** Verified parts are whole pieces, so each part's pieces are checked before it is delivered. */
function wholePieces(partBytes: number, pieceSize: number | undefined): number {
  return pieceSize === undefined ? partBytes : Math.ceil(partBytes / pieceSize) * pieceSize;
}
