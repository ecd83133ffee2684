/**
 * The loader's library entry points. `openLoadStream` builds the read stream for a model already
 * opened with `openModelSource`; `loadTensors` does everything and yields tensors:
 *
 *   for await (const tensor of loadTensors('/models/llama', { memoryBytes: 512 << 20 })) {
 *     use(tensor.name, tensor.dtype, tensor.shape, tensor.bytes); // bytes valid until the next turn
 *   }
 *
 * With `partBytes` a tensor larger than that comes in parts (`tensor.part` gives the offset within
 * the tensor and marks the last part), so the budget no longer has to hold the largest tensor.
 */

import type { Manifest } from '../../manifest/manifest.js';
import type { OpenOriginOptions } from '../../origin/open.js';
import type { Origin } from '../../origin/origin.js';
import { closeModelSource, openModelSource, type ModelSource } from './model-source.js';
import { ReadStream, type ReadStreamOptions } from './read-stream.js';
import { describeTag, modelRequests, type LoadTag, type RequestChoice } from './requests.js';
import type { LoadedTensor, StreamStats } from './types.js';

export type LoadStreamOptions = Omit<ReadStreamOptions<LoadTag>, 'pieceSize' | 'describe'>;

export function openLoadStream(
  model: ModelSource,
  choice: RequestChoice = {},
  options: LoadStreamOptions = {},
): ReadStream<LoadTag> {
  return new ReadStream(model.origin, model.files, modelRequests(model, choice), {
    ...options,
    ...(model.pieceSize === undefined ? {} : { pieceSize: model.pieceSize }),
    describe: describeTag,
  });
}

export interface LoadTensorsOptions extends LoadStreamOptions {
  /** Verify every piece against this manifest; without it the origin is trusted. */
  manifest?: Manifest;
  origin?: OpenOriginOptions;
  /** Called once the stream ends, successfully or not, with its counters. */
  onStats?: (stats: StreamStats) => void;
}

/** Yields every tensor of the model as soon as its bytes are in (and verified, given a manifest). */
export async function* loadTensors(
  source: string | Origin,
  options: LoadTensorsOptions = {},
): AsyncGenerator<LoadedTensor, void, undefined> {
  const { manifest, origin, onStats, ...streamOptions } = options;
  const model = await openModelSource(source, {
    ...(manifest === undefined ? {} : { manifest }),
    ...(origin === undefined ? {} : { origin }),
    ...(options.signal === undefined ? {} : { signal: options.signal }),
  });
  let stream: ReadStream<LoadTag> | undefined;
  try {
    stream = openLoadStream(model, {}, streamOptions);
    for await (const { request, bytes, part } of stream) {
      if (request.tag.kind !== 'tensor') continue;
      const { tensor } = request.tag;
      const loaded: LoadedTensor = {
        name: tensor.name,
        dtype: tensor.dtype,
        shape: tensor.shape,
        file: tensor.file,
        bytes,
      };
      if (part !== undefined) loaded.part = part;
      yield loaded;
    }
  } finally {
    if (stream !== undefined) {
      await stream.return();
      onStats?.(stream.stats);
    }
    await closeModelSource(model);
  }
}
