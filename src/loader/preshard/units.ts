/**
 * How pre-sharding reads the source, pure: which source tensors must be in memory together, as read
 * units, and what memory that takes.
 *
 * Every source tensor some rank holds is read once, whole, so that one read serves every rank's slice
 * and a per-tensor FP8 scale can see the whole tensor. Tensors a fused output stacks (vllm q/k/v,
 * gate/up) must be in memory at the same time:
 * - when they lie in one file, the unit is one contiguous byte range from the first to the last of
 *   them, one request of the read stream; whatever lies between them joins the unit (in a Hugging Face
 *   checkpoint, o_proj sits between k_proj and q_proj), and overlapping units merge;
 * - when they lie in different files, the unit is staged: after the main pass each such unit is read
 *   by a small stream of its own and copied into a staging buffer until all its parts are in. Real
 *   checkpoints split files between layers, so these are rare.
 *
 * Memory: the stream's arena (at least the largest streamed unit), the scratch buffer of the output
 * being built (the largest one that is not a plain view of the source), and, for a staged unit, its
 * staging copy. `checkMemory` proves up front that the budget holds all of it.
 */

import { WeightcastError } from '../../errors.js';
import type { SourceTensor } from '../plan/types.js';
import type { OutputTensor, PreshardLayoutPlan } from './layout.js';

export interface StreamedUnit {
  id: number;
  file: string;
  /** The byte range read: [start, end) of file. */
  start: number;
  end: number;
  /** The needed tensors inside the range, in file order. */
  tensors: SourceTensor[];
}

export interface StagedUnit {
  id: number;
  tensors: SourceTensor[];
  /** Bytes of the staging copy: all its tensors. */
  bytes: number;
}

export interface ReadUnits {
  streamed: StreamedUnit[];
  staged: StagedUnit[];
  /** Source tensor name to unit id. */
  unitOf: Map<string, number>;
}

export function planReadUnits(layout: PreshardLayoutPlan): ReadUnits {
  const sets = new DisjointSets([...layout.sources.keys()]);
  for (const group of layout.fusionGroups) {
    for (const name of group.slice(1)) sets.union(group[0] as string, name);
  }
  const members = new Map<string, SourceTensor[]>();
  for (const [name, tensor] of layout.sources) {
    const root = sets.find(name);
    members.set(root, [...(members.get(root) ?? []), tensor]);
  }
  const staged: SourceTensor[][] = [];
  const spans: Array<{ file: string; start: number; end: number; tensors: SourceTensor[] }> = [];
  for (const tensors of members.values()) {
    const files = new Set(tensors.map((tensor) => tensor.file));
    if (files.size > 1) {
      staged.push(tensors);
      continue;
    }
    spans.push({
      file: tensors[0]?.file ?? '',
      start: Math.min(...tensors.map((tensor) => tensor.start)),
      end: Math.max(...tensors.map((tensor) => tensor.end)),
      tensors,
    });
  }
  const streamedSpans = mergeSpans(spans);
  const unitOf = new Map<string, number>();
  const streamed = streamedSpans.map((span, id) => {
    const tensors = [...span.tensors].sort((a, b) => a.start - b.start);
    for (const tensor of tensors) unitOf.set(tensor.name, id);
    return { id, ...span, tensors };
  });
  const stagedUnits = staged
    .map((tensors) => [...tensors].sort((a, b) => compare(a.file, b.file) || a.start - b.start))
    .sort((a, b) => compare(a[0]?.name ?? '', b[0]?.name ?? ''))
    .map((tensors, index) => {
      const id = streamed.length + index;
      for (const tensor of tensors) unitOf.set(tensor.name, id);
      return { id, tensors, bytes: tensors.reduce((total, tensor) => total + tensor.end - tensor.start, 0) };
    });
  return { streamed, staged: stagedUnits, unitOf };
}

/** Spans of one file that overlap become one; the result is sorted by file, then offset. */
function mergeSpans<T extends { file: string; start: number; end: number; tensors: SourceTensor[] }>(
  spans: readonly T[],
): Array<{ file: string; start: number; end: number; tensors: SourceTensor[] }> {
  const sorted = [...spans].sort((a, b) => compare(a.file, b.file) || a.start - b.start || a.end - b.end);
  const merged: Array<{ file: string; start: number; end: number; tensors: SourceTensor[] }> = [];
  for (const span of sorted) {
    const last = merged.at(-1);
    if (last !== undefined && last.file === span.file && span.start < last.end) {
      last.end = Math.max(last.end, span.end);
      last.tensors.push(...span.tensors);
    } else {
      merged.push({ file: span.file, start: span.start, end: span.end, tensors: [...span.tensors] });
    }
  }
  return merged;
}

function compare(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

class DisjointSets {
  private readonly parent = new Map<string, string>();

  constructor(names: readonly string[]) {
    for (const name of names) this.parent.set(name, name);
  }

  find(name: string): string {
    let root = name;
    for (
      let next = this.parent.get(root);
      next !== undefined && next !== root;
      next = this.parent.get(root)
    ) {
      root = next;
    }
    this.parent.set(name, root);
    return root;
  }

  union(a: string, b: string): void {
    if (!this.parent.has(a) || !this.parent.has(b)) return;
    const rootA = this.find(a);
    const rootB = this.find(b);
    if (rootA !== rootB) this.parent.set(rootB, rootA);
  }
}

/**
 * Bytes an output needs besides the source: nothing when it is the source tensor, or a dim-0 slice of
 * it, stored as it is (a view of the read buffer); else its own bytes (gathered, stacked, padded or
 * quantised), plus the scale tensor built with an FP8 weight.
 */
export function scratchBytes(output: OutputTensor, scale: OutputTensor | undefined): number {
  const [component] = output.components;
  const view =
    output.encoding.kind === 'copy' &&
    output.components.length === 1 &&
    output.padRows === 0 &&
    (component?.slice === null || component?.slice.dim === 0);
  if (view) return 0;
  return output.bytes + (scale?.bytes ?? 0);
}

export interface MemoryPlan {
  /** The budget. */
  memoryBytes: number;
  /** Reserved for the largest output built outside the read buffers. */
  scratchBytes: number;
  /** The main stream's budget: the rest. */
  streamBytes: number;
  largestUnitBytes: number;
  /** The largest staged unit's copy plus its largest tensor, when there are staged units. */
  stagedBytesPeak: number;
}

/**
 * Read-buffer bytes for a byte range: exactly the range, or when verifying against a manifest the whole
 * pieces around it plus one piece carried between buffers (what the read stream holds).
 */
export function readBufferBytes(start: number, end: number, pieceSize: number | undefined): number {
  if (pieceSize === undefined) return end - start;
  return Math.ceil(end / pieceSize) * pieceSize - Math.floor(start / pieceSize) * pieceSize + pieceSize;
}

export function checkMemory(
  layout: PreshardLayoutPlan,
  units: ReadUnits,
  memoryBytes: number,
  pieceSize?: number,
): MemoryPlan {
  let scratch = 0;
  for (const rank of layout.ranks) {
    const byName = new Map(rank.tensors.map((tensor) => [tensor.name, tensor]));
    for (const output of rank.tensors) {
      if (output.encoding.kind === 'fp8-scale') continue;
      const scale = output.encoding.kind === 'fp8' ? byName.get(output.encoding.scale) : undefined;
      scratch = Math.max(scratch, scratchBytes(output, scale));
    }
  }
  const streamBytes = memoryBytes - scratch;
  let largest: StreamedUnit | undefined;
  let largestUnitBytes = 0;
  for (const unit of units.streamed) {
    const bytes = readBufferBytes(unit.start, unit.end, pieceSize);
    if (largest === undefined || bytes > largestUnitBytes) {
      largest = unit;
      largestUnitBytes = bytes;
    }
  }
  if (largest !== undefined && largestUnitBytes > streamBytes) {
    const names = largest.tensors.map((tensor) => tensor.name);
    throw tooLarge(
      `${largest.file}: ${describe(names)} needs ${largestUnitBytes} bytes of read buffer plus ${scratch} to build outputs`,
      largestUnitBytes + scratch,
      memoryBytes,
      largest.file,
      names[0],
    );
  }
  let stagedBytesPeak = 0;
  for (const unit of units.staged) {
    const biggest = Math.max(
      ...unit.tensors.map((tensor) => readBufferBytes(tensor.start, tensor.end, pieceSize)),
    );
    const needed = unit.bytes + biggest + scratch;
    stagedBytesPeak = Math.max(stagedBytesPeak, unit.bytes + biggest);
    if (needed > memoryBytes) {
      const names = unit.tensors.map((tensor) => tensor.name);
      throw tooLarge(
        `${describe(names)} (in different files) need ${unit.bytes} bytes staged, ${biggest} of read buffer and ${scratch} to build outputs`,
        needed,
        memoryBytes,
        unit.tensors[0]?.file,
        names[0],
      );
    }
  }
  return { memoryBytes, scratchBytes: scratch, streamBytes, largestUnitBytes, stagedBytesPeak };
}

function describe(names: readonly string[]): string {
  return names.length === 1 ? `tensor ${names[0]}` : `tensors ${names.join(', ')} (read together)`;
}

function tooLarge(
  what: string,
  needed: number,
  memoryBytes: number,
  file: string | undefined,
  tensor: string | undefined,
): WeightcastError {
  return new WeightcastError(
    'LOADER_TENSOR_TOO_LARGE',
    `${what}, over the memory budget of ${memoryBytes} bytes; raise --memory-mb`,
    {
      bytesNeeded: needed,
      memoryBytes,
      ...(file === undefined ? {} : { file }),
      ...(tensor === undefined ? {} : { tensor }),
    },
  );
}
