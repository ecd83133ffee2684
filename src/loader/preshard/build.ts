/**
 * Builds one output tensor's bytes from the whole source tensors in memory, pure (buffers in, buffers
 * out): a view when the output is a source tensor or a dim-0 slice of one stored as it is; otherwise
 * bytes in the scratch buffer with the slices gathered (dim 1), stacked (fused parts), zero-padded
 * (vocabulary) or quantised to FP8 together with the scale tensor.
 *
 * The scratch is one buffer, sized by units.ts for the largest output, reused for every output: a
 * fresh buffer per tensor would leave garbage for the collector to find later, and resident memory
 * would drift past the budget.
 */

import { assert } from '../../errors.js';
import { DTYPE_BITS } from '../../format/dtype.js';
import type { SourceTensor } from '../plan/types.js';
import {
  amaxOf,
  elementReader,
  isFloatSource,
  quantiseBlocks,
  quantiseRun,
  scaleFor,
  type ElementReader,
} from './fp8.js';
import type { OutputComponent, OutputTensor } from './layout.js';

/** A whole source tensor's bytes, valid while the unit is being processed. */
export interface SourceBytes {
  tensor: SourceTensor;
  bytes: Uint8Array;
}

export type SourceLookup = (name: string) => SourceBytes;

/**
 * One reusable buffer: `take` hands out zeroed views from its start, one output (and its scale) at a
 * time; `reset` before the next output.
 */
export class Scratch {
  private readonly buffer: Uint8Array;
  private used = 0;

  constructor(bytes: number) {
    this.buffer = new Uint8Array(bytes);
  }

  get capacity(): number {
    return this.buffer.length;
  }

  reset(): void {
    this.used = 0;
  }

  take(bytes: number): Uint8Array {
    assert(
      this.used + bytes <= this.buffer.length,
      `scratch of ${this.buffer.length} bytes holds ${bytes} more`,
    );
    const view = this.buffer.subarray(this.used, this.used + bytes);
    view.fill(0);
    this.used += bytes;
    return view;
  }
}

export interface BuiltOutput {
  bytes: Uint8Array;
  /** The FP8 scale tensor's bytes, for an FP8 weight. */
  scale?: Uint8Array;
}

function product(values: readonly number[]): number {
  return values.reduce((total, value) => total * value, 1);
}

/** Largest finite magnitudes of whole source tensors, computed once per tensor. */
export class AmaxCache {
  private readonly values = new Map<string, number>();

  of(source: SourceBytes): number {
    let amax = this.values.get(source.tensor.name);
    if (amax === undefined) {
      const { dtype, shape } = source.tensor;
      assert(isFloatSource(dtype), `amax of ${source.tensor.name} needs a float tensor`);
      amax = amaxOf(elementReader(source.bytes, dtype), 0, product(shape));
      this.values.set(source.tensor.name, amax);
    }
    return amax;
  }
}

/** Builds an output; views of `scratch` stay valid until its next `reset`. */
export function buildOutput(
  output: OutputTensor,
  lookup: SourceLookup,
  amax: AmaxCache,
  scratch: Scratch,
): BuiltOutput {
  scratch.reset();
  if (output.encoding.kind === 'fp8') {
    return output.encoding.scheme === 'per-tensor'
      ? quantisePerTensor(output, lookup, amax, scratch)
      : quantisePerBlock(output, lookup, scratch);
  }
  assert(output.encoding.kind === 'copy', `scale tensor ${output.name} is built with its weight`);
  const [first] = output.components;
  if (output.components.length === 1 && output.padRows === 0 && first !== undefined) {
    return { bytes: componentBytes(first, lookup(first.source), scratch) };
  }
  const out = scratch.take(output.bytes);
  const rowBytes = (product(output.shape.slice(1)) * DTYPE_BITS[output.dtype]) / 8;
  for (const component of output.components) {
    // Stacked parts are dim-0 slices: views, so the scratch holds only `out`.
    out.set(componentBytes(component, lookup(component.source), scratch), component.row * rowBytes);
  }
  return { bytes: out };
}

/** A component's slice in row-major order: a view for whole tensors and dim-0 slices, gathered for dim 1. */
export function componentBytes(
  component: OutputComponent,
  source: SourceBytes,
  scratch: Scratch,
): Uint8Array {
  const { slice } = component;
  const { shape, dtype } = source.tensor;
  if (slice === null) return source.bytes;
  const stepBytes = (product(shape.slice(slice.dim + 1)) * DTYPE_BITS[dtype]) / 8;
  if (slice.dim === 0) {
    return source.bytes.subarray(slice.start * stepBytes, (slice.start + slice.length) * stepBytes);
  }
  const rows = shape[0] ?? 1;
  const rowBytes = (shape[1] ?? 0) * stepBytes;
  const runBytes = slice.length * stepBytes;
  const out = scratch.take(rows * runBytes);
  for (let row = 0; row < rows; row++) {
    const from = row * rowBytes + slice.start * stepBytes;
    out.set(source.bytes.subarray(from, from + runBytes), row * runBytes);
  }
  return out;
}

/** A component's slice of a 2-D source, seen as a matrix of the source's elements. */
function componentMatrix(
  component: OutputComponent,
  source: SourceBytes,
): { read: ElementReader; rows: number; columns: number; origin: number; rowStride: number } {
  const { dtype, shape } = source.tensor;
  assert(isFloatSource(dtype) && shape.length === 2, `${source.tensor.name} is a float matrix`);
  const [sourceRows = 0, sourceColumns = 0] = shape;
  const read = elementReader(source.bytes, dtype);
  const { slice } = component;
  if (slice === null) {
    return { read, rows: sourceRows, columns: sourceColumns, origin: 0, rowStride: sourceColumns };
  }
  if (slice.dim === 0) {
    return {
      read,
      rows: slice.length,
      columns: sourceColumns,
      origin: slice.start * sourceColumns,
      rowStride: sourceColumns,
    };
  }
  return { read, rows: sourceRows, columns: slice.length, origin: slice.start, rowStride: sourceColumns };
}

/**
 * One scale for the whole weight: from the whole source tensor (the largest of the parts' for a fused
 * tensor), so every rank holding a slice of it gets the same scale.
 */
function quantisePerTensor(
  output: OutputTensor,
  lookup: SourceLookup,
  amax: AmaxCache,
  scratch: Scratch,
): BuiltOutput {
  let largest = 0;
  for (const component of output.components) largest = Math.max(largest, amax.of(lookup(component.source)));
  const scale = scaleFor(largest);
  const columns = output.shape[1] ?? 0;
  const codes = scratch.take(output.bytes);
  for (const component of output.components) {
    const matrix = componentMatrix(component, lookup(component.source));
    for (let row = 0; row < matrix.rows; row++) {
      const first = matrix.origin + row * matrix.rowStride;
      quantiseRun(matrix.read, first, matrix.columns, scale, codes, (component.row + row) * columns);
    }
  }
  const scaleBytes = scratch.take(4);
  new DataView(scaleBytes.buffer, scaleBytes.byteOffset, 4).setFloat32(0, scale, true);
  return { bytes: codes, scale: scaleBytes };
}

/** 128x128 blocks over the rank's slice (the same blocks as the whole tensor's when the slice is block-aligned). */
function quantisePerBlock(output: OutputTensor, lookup: SourceLookup, scratch: Scratch): BuiltOutput {
  const [component] = output.components;
  assert(component !== undefined && output.components.length === 1, `${output.name}: blocks of one part`);
  const matrix = componentMatrix(component, lookup(component.source));
  const codes = scratch.take(output.bytes);
  const scales = scratch.take(Math.ceil(matrix.rows / 128) * Math.ceil(matrix.columns / 128) * 4);
  quantiseBlocks(matrix, codes, scales);
  return { bytes: codes, scale: scales };
}
