/**
 * Writes safetensors files as a stream: plan the layout (header and offsets) first, then append
 * each tensor's bytes in layout order with large sequential writes. Nothing holds a whole tensor or
 * file in memory. The header is padded with spaces to a multiple of 8 bytes, and tensors are laid out
 * widest element first so that every tensor starts at a multiple of its element size.
 */

import { open, type FileHandle } from 'node:fs/promises';
import { WeightcastError, throwIfAborted } from '../errors.js';
import { DTYPE_BITS, tensorBits, type Dtype } from './dtype.js';

export interface TensorSpec {
  name: string;
  dtype: Dtype;
  shape: number[];
}

export interface PlannedTensor extends TensorSpec {
  /** Offsets relative to the start of the data section, as in the header's `data_offsets`. */
  begin: number;
  end: number;
}

export interface SafetensorsLayout {
  /** The 8-byte length prefix followed by the padded JSON header. */
  header: Buffer;
  /** Absolute offset of the first data byte: 8 + header length. */
  dataStart: number;
  /** Tensors in the order their bytes appear in the file. */
  tensors: PlannedTensor[];
  fileSize: number;
}

const HEADER_ALIGNMENT_BYTES = 8;

export function planSafetensorsLayout(
  specs: readonly TensorSpec[],
  metadata?: Readonly<Record<string, string>>,
): SafetensorsLayout {
  const seen = new Set<string>();
  for (const spec of specs) {
    if (seen.has(spec.name) || spec.name === '__metadata__') {
      throw new WeightcastError('SAFETENSORS_DUPLICATE_TENSOR', `tensor name used twice: ${spec.name}`, {
        tensor: spec.name,
      });
    }
    seen.add(spec.name);
  }
  // Stable sort, widest elements first: every offset is then a multiple of the element width.
  const ordered = specs
    .map((spec, index) => ({ spec, index }))
    .sort((a, b) => DTYPE_BITS[b.spec.dtype] - DTYPE_BITS[a.spec.dtype] || a.index - b.index)
    .map(({ spec }) => spec);
  const tensors: PlannedTensor[] = [];
  let offset = 0;
  for (const spec of ordered) {
    const bits = tensorBits(spec.dtype, spec.shape);
    if (bits % 8n !== 0n) {
      throw new WeightcastError(
        'SAFETENSORS_MISALIGNED_SLICE',
        `tensor ${spec.name} (${spec.dtype} ${JSON.stringify(spec.shape)}) does not fill whole bytes`,
        { tensor: spec.name },
      );
    }
    const bytes = bits / 8n;
    if (BigInt(offset) + bytes > BigInt(Number.MAX_SAFE_INTEGER)) {
      throw new WeightcastError('SAFETENSORS_OVERFLOW', `tensor ${spec.name} is too large`, {
        tensor: spec.name,
      });
    }
    const end = offset + Number(bytes);
    tensors.push({ name: spec.name, dtype: spec.dtype, shape: [...spec.shape], begin: offset, end });
    offset = end;
  }
  const json: Record<string, unknown> = {};
  if (metadata !== undefined) json['__metadata__'] = { ...metadata };
  for (const t of tensors) json[t.name] = { dtype: t.dtype, shape: t.shape, data_offsets: [t.begin, t.end] };
  const text = Buffer.from(JSON.stringify(json), 'utf8');
  const padded = Math.ceil(text.length / HEADER_ALIGNMENT_BYTES) * HEADER_ALIGNMENT_BYTES;
  const header = Buffer.alloc(8 + padded, 0x20);
  header.writeBigUInt64LE(BigInt(padded), 0);
  text.copy(header, 8);
  return { header, dataStart: 8 + padded, tensors, fileSize: 8 + padded + offset };
}

/**
 * Appends tensor bytes to a file in layout order. `write` may be called with any chunking; the writer
 * counts bytes so that `close` fails if the file would not match its header.
 */
export class SafetensorsFileWriter {
  readonly layout: SafetensorsLayout;
  private readonly handle: FileHandle;
  private readonly path: string;
  private position: number;

  private constructor(handle: FileHandle, path: string, layout: SafetensorsLayout) {
    this.handle = handle;
    this.path = path;
    this.layout = layout;
    this.position = 0;
  }

  static async create(path: string, layout: SafetensorsLayout): Promise<SafetensorsFileWriter> {
    const handle = await open(path, 'w');
    try {
      await handle.write(layout.header, 0, layout.header.length, 0);
    } catch (error) {
      await handle.close();
      throw error;
    }
    const writer = new SafetensorsFileWriter(handle, path, layout);
    writer.position = layout.header.length;
    return writer;
  }

  /** The tensor whose bytes the next `write` continues, or undefined when all data is written. */
  get currentTensor(): PlannedTensor | undefined {
    const dataOffset = this.position - this.layout.dataStart;
    return this.layout.tensors.find((t) => dataOffset >= t.begin && dataOffset < t.end);
  }

  async write(chunk: Uint8Array, signal?: AbortSignal): Promise<void> {
    throwIfAborted(signal, `writing ${this.path}`);
    if (this.position + chunk.length > this.layout.fileSize) {
      throw new WeightcastError(
        'SAFETENSORS_WRITE_MISMATCH',
        `${this.path}: more tensor bytes written than the header declares`,
        { file: this.path },
      );
    }
    let written = 0;
    while (written < chunk.length) {
      const { bytesWritten } = await this.handle.write(
        chunk,
        written,
        chunk.length - written,
        this.position + written,
      );
      written += bytesWritten;
    }
    this.position += chunk.length;
  }

  async close(): Promise<void> {
    try {
      if (this.position !== this.layout.fileSize) {
        throw new WeightcastError(
          'SAFETENSORS_WRITE_MISMATCH',
          `${this.path}: ${this.layout.fileSize - this.position} tensor bytes missing at close`,
          { file: this.path },
        );
      }
    } finally {
      await this.handle.close();
    }
  }

  /** Closes without the completeness check, for error paths. */
  async abandon(): Promise<void> {
    await this.handle.close();
  }
}
