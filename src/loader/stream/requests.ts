/**
 * Which bytes of a model to ask the read stream for. Each request carries a tag saying what it is:
 * a tensor (yielded to loaders), a safetensors header or a chunk of another file (both only wanted
 * by outputs that reproduce the original files). A slice-aware loader builds its own requests: one
 * per slice, with the slice's byte ranges, and the same stream reads them.
 */

import type { ModelSource } from './model-source.js';
import { isSafetensorsPath } from './model-source.js';
import type { ReadRequest, TensorInfo } from './types.js';

export type LoadTag =
  | { kind: 'tensor'; tensor: TensorInfo }
  | { kind: 'header'; file: string }
  | { kind: 'chunk'; file: string; start: number };

export interface RequestChoice {
  /** The safetensors headers, [0, dataStart) of each file. */
  headers?: boolean;
  /** Every file that is not a safetensors file, in chunks of `chunkBytes`. */
  otherFiles?: boolean;
  chunkBytes?: number;
}

const CHUNK_BYTES_DEFAULT = 8 * 1024 * 1024;

export function modelRequests(model: ModelSource, choice: RequestChoice = {}): Array<ReadRequest<LoadTag>> {
  const requests: Array<ReadRequest<LoadTag>> = [];
  const chunkBytes = choice.chunkBytes ?? CHUNK_BYTES_DEFAULT;
  for (const file of model.files) {
    const index = model.safetensors.get(file.path);
    if (index !== undefined) {
      if (choice.headers === true) {
        requests.push({
          file: file.path,
          ranges: [{ start: 0, end: index.dataStart }],
          tag: { kind: 'header', file: file.path },
        });
      }
      for (const tensor of index.tensors) {
        requests.push({
          file: file.path,
          ranges: [{ start: tensor.start, end: tensor.end }],
          tag: { kind: 'tensor', tensor },
        });
      }
    } else if (choice.otherFiles === true) {
      // An empty file is one empty request, so that outputs still create it.
      for (let start = 0; start < file.size || start === 0; start += chunkBytes) {
        const end = Math.min(file.size, start + chunkBytes);
        requests.push({
          file: file.path,
          ranges: [{ start, end }],
          tag: { kind: 'chunk', file: file.path, start },
        });
      }
    }
  }
  return requests;
}

export function describeTag(tag: LoadTag): string {
  if (tag.kind === 'tensor') return `tensor ${JSON.stringify(tag.tensor.name)}`;
  if (tag.kind === 'header') return 'the safetensors header';
  return `bytes from ${tag.start}`;
}

/** Safetensors files of the model, in file order. */
export function safetensorsPaths(model: ModelSource): string[] {
  return model.files.map((file) => file.path).filter((path) => isSafetensorsPath(path));
}
