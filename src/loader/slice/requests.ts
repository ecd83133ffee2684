/**
 * From a rank's plan to read requests, pure: each tensor the rank holds becomes one request whose
 * ranges are its slice's byte ranges in the slice's row-major order (a dim-0 slice is one range, a
 * dim-1 slice one range per row, touching ranges merged), so the stream hands back the slice already
 * contiguous. Requests go in model order (embeddings, then layer by layer, then the final norm and
 * lm_head) and are cut into phases, each read by its own stream one after the other: the first phase
 * is the rank's first layer, so that a loader reading through a filling agent gets (and makes the agent
 * hurry) the first layer before anything else.
 */

import { expandRuns } from '../plan/byte-ranges.js';
import type { RankPlan, RankTensor } from '../plan/types.js';
import type { ByteRange, ReadRequest } from '../stream/types.js';

export type SliceTag =
  { kind: 'slice'; tensor: RankTensor; firstLayer: boolean } | { kind: 'chunk'; file: string; start: number };

/** Where a tensor sits in model order: -1 before the layers (embeddings), the layer, or +Infinity after. */
export function layerOrder(name: string): number {
  const match = /(?:^|\.)(?:layers|h|blocks)\.(\d+)\./.exec(name);
  if (match !== null) return Number(match[1]);
  return /embed|wte|wpe/.test(name) ? -1 : Number.POSITIVE_INFINITY;
}

/** The byte ranges of a tensor's slice, in order, with touching ranges merged. */
export function sliceByteRanges(tensor: RankTensor): ByteRange[] {
  const ranges: ByteRange[] = [];
  for (const [start, end] of expandRuns(tensor.ranges)) {
    const last = ranges.at(-1);
    if (last !== undefined && last.end === start) last.end = end;
    else ranges.push({ start, end });
  }
  return ranges;
}

/** The rank's tensors in model order (stable within one layer). */
export function modelOrder(rank: RankPlan): RankTensor[] {
  return rank.tensors
    .map((tensor, index) => ({ tensor, index, layer: layerOrder(tensor.name) }))
    .sort((a, b) => a.layer - b.layer || a.index - b.index)
    .map(({ tensor }) => tensor);
}

/**
 * The tensors that make the rank's first layer: everything up to and including its stage's first
 * decoder layer (the embedding too on stage 0). A rank without decoder layers has none.
 */
export function firstLayerNames(rank: RankPlan): Set<string> {
  const first = rank.layers[1] > rank.layers[0] ? rank.layers[0] : Number.NEGATIVE_INFINITY;
  return new Set(rank.tensors.filter((t) => layerOrder(t.name) <= first).map((t) => t.name));
}

export interface PhaseOptions {
  /** 'model': first layer, then layers in order, each phase at least `phaseBytesMin`; 'single': one phase. */
  order: 'model' | 'single';
  phaseBytesMin: number;
}

/** The rank's slice requests, cut into phases read one after the other. */
export function slicePhases(rank: RankPlan, options: PhaseOptions): Array<Array<ReadRequest<SliceTag>>> {
  const first = firstLayerNames(rank);
  const request = (tensor: RankTensor): ReadRequest<SliceTag> => ({
    file: tensor.file,
    ranges: sliceByteRanges(tensor),
    tag: { kind: 'slice', tensor, firstLayer: first.has(tensor.name) },
  });
  const ordered = modelOrder(rank);
  if (options.order === 'single') return ordered.length === 0 ? [] : [ordered.map(request)];
  const phases: Array<Array<ReadRequest<SliceTag>>> = [];
  const head = ordered.filter((t) => first.has(t.name));
  if (head.length > 0) phases.push(head.map(request));
  let current: Array<ReadRequest<SliceTag>> = [];
  let currentBytes = 0;
  let currentLayer: number | undefined;
  for (const tensor of ordered.filter((t) => !first.has(t.name))) {
    const layer = layerOrder(tensor.name);
    // A phase ends only between layers, once it holds enough bytes to be worth a stream of its own.
    if (currentLayer !== undefined && layer !== currentLayer && currentBytes >= options.phaseBytesMin) {
      phases.push(current);
      current = [];
      currentBytes = 0;
    }
    current.push(request(tensor));
    currentBytes += tensor.bytes;
    currentLayer = layer;
  }
  if (current.length > 0) phases.push(current);
  return phases;
}

/** Chunk requests for whole files (config, tokenizer), `chunkBytes` at a time; an empty file is one empty request. */
export function fileChunkRequests(
  files: ReadonlyArray<{ path: string; size: number }>,
  chunkBytes: number,
): Array<ReadRequest<SliceTag>> {
  const requests: Array<ReadRequest<SliceTag>> = [];
  for (const file of files) {
    for (let start = 0; start < file.size || start === 0; start += chunkBytes) {
      const end = Math.min(file.size, start + chunkBytes);
      requests.push({
        file: file.path,
        ranges: [{ start, end }],
        tag: { kind: 'chunk', file: file.path, start },
      });
    }
  }
  return requests;
}

export function describeSliceTag(tag: SliceTag): string {
  if (tag.kind === 'chunk') return `bytes from ${tag.start} of ${tag.file}`;
  const { slice } = tag.tensor;
  const part = slice === null ? 'whole' : `dim ${slice.dim} [${slice.start}, ${slice.start + slice.length})`;
  return `tensor ${JSON.stringify(tag.tensor.name)} (${part})`;
}
