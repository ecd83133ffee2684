/**
 * `model.safetensors.index.json`, the Hugging Face file that maps each tensor to the shard holding it:
 * `{"metadata": {"total_size": N}, "weight_map": {"tensor.name": "model-00001-of-00004.safetensors"}}`.
 * Parsing validates it (shard names must be safe relative paths); serialising sorts tensor names so
 * the output is byte-for-byte deterministic. Pure: the file I/O is in index-json-file.ts.
 */

import * as s from '../util/schema.js';
import { WeightcastError } from '../errors.js';
import { safeRelativePathProblem } from '../util/safe-path.js';

export const INDEX_FILE_NAME = 'model.safetensors.index.json';
/** The largest index read (one of 100,000 tensors, a large mixture of experts, is about 10 MB). */
export const INDEX_BYTES_MAX = 64 * 1024 * 1024;

export interface SafetensorsIndex {
  metadata: Record<string, unknown>;
  /** Tensor name to shard file name. */
  weightMap: Map<string, string>;
}

const indexSchema = s.object({
  metadata: s.optional(s.record(s.unknown())),
  weight_map: s.record(s.string()),
});

export function parseIndexJson(text: string, file: string): SafetensorsIndex {
  if (text.length > INDEX_BYTES_MAX) {
    throw new WeightcastError('INDEX_INVALID', `${file}: index is larger than ${INDEX_BYTES_MAX} bytes`, {
      file,
    });
  }
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (error) {
    throw new WeightcastError('INDEX_INVALID', `${file}: not valid JSON`, { file }, { cause: error });
  }
  const parsed = s.safeParse(indexSchema, raw);
  if (!parsed.success) {
    throw new WeightcastError(
      'INDEX_INVALID',
      `${file}: not a safetensors index at ${parsed.issue.message}`,
      {
        file,
      },
    );
  }
  const weightMap = new Map<string, string>();
  for (const [tensor, shard] of Object.entries(parsed.data.weight_map)) {
    const problem = safeRelativePathProblem(shard);
    if (problem !== undefined) {
      throw new WeightcastError(
        'INDEX_INVALID',
        `${file}: shard ${JSON.stringify(shard)} of tensor ${tensor} ${problem}`,
        { file, tensor },
      );
    }
    weightMap.set(tensor, shard);
  }
  return { metadata: parsed.data.metadata ?? {}, weightMap };
}

export function serializeIndexJson(index: SafetensorsIndex): string {
  const weightMap: Record<string, string> = {};
  for (const name of [...index.weightMap.keys()].sort()) weightMap[name] = index.weightMap.get(name) ?? '';
  return JSON.stringify({ metadata: index.metadata, weight_map: weightMap }, null, 2) + '\n';
}

/** The distinct shard files an index names, sorted. */
export function indexShardFiles(index: SafetensorsIndex): string[] {
  return [...new Set(index.weightMap.values())].sort();
}
