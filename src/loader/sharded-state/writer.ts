/**
 * vLLM `sharded_state` files for one rank: `model-rank-{rank}-part-{part}.safetensors`, part numbers
 * from 0 and not padded, each part a plain safetensors file. Tensors are added one at a time in any
 * order and never split; a tensor goes to the current part unless its bytes would take the part's data
 * past `partBytesMax`, in which case the part is closed and a new one begun (as vLLM's saver does; a
 * tensor larger than the limit gets a part of its own). The decision uses only the tensors seen so far,
 * because callers stream: the loader adds slices as they arrive, the pre-sharder as it makes them.
 *
 * Memory stays at one tensor: a safetensors header comes before the data it describes, so each part
 * reserves `headerBytesReserve` bytes at its start, tensor bytes are written after it as they come, and
 * the header is written into the reserve when the part closes, padded with spaces (JSON whitespace, as
 * the format itself pads) so that the data starts exactly where it was written. A tensor whose header
 * entry would not fit in the reserve also starts a new part. The reserve is a multiple of 8 so the data
 * section is 8-aligned; tensors are stored in arrival order with no gaps (the format requires contiguous
 * offsets), so a tensor is aligned for zero-copy readers when the bytes before it are a multiple of its
 * element size, which holds for the even shapes real models have.
 *
 * Every part is written as `<name>.weightcast-partial`; `finish` renames them all only once every part
 * is complete, so a directory never shows a partial set of a rank's parts under the final names, and it
 * removes parts of this rank left by an earlier run with more parts. `abandon` removes the partials.
 */

import { mkdir, open, readdir, rename, rm, type FileHandle } from 'node:fs/promises';
import { join } from 'node:path';
import { WeightcastError, assert, asIoError, throwIfAborted } from '../../errors.js';
import { tensorBits, type Dtype } from '../../format/dtype.js';

export const PART_BYTES_MAX_DEFAULT = 5 * 1024 ** 3;
export const PARTIAL_SUFFIX = '.weightcast-partial';
const HEADER_ALIGNMENT_BYTES = 8;
const LENGTH_PREFIX_BYTES = 8;
const HEADER_RESERVE_MIN = 16 * 1024;
const HEADER_RESERVE_MAX = 1024 * 1024;

export interface ShardedStateWriterOptions {
  /** Tensor bytes per part before a new part begins (default 5 GiB, as vLLM). */
  partBytesMax?: number;
  /**
   * Header bytes reserved at the start of each part (rounded up to 8). Default: partBytesMax / 1024,
   * between 16 KiB and 1 MiB, far more than the header of a part's tensors needs in practice.
   */
  headerBytesReserve?: number;
  /** `__metadata__` of every part; default `{ format: 'pt' }`. */
  metadata?: Readonly<Record<string, string>>;
  signal?: AbortSignal;
}

export interface ShardedStatePart {
  /** File name, relative to the writer's directory. */
  file: string;
  part: number;
  /** Tensor names in the order their bytes are stored. */
  tensors: string[];
  /** Tensor bytes (the data section). */
  dataBytes: number;
  fileBytes: number;
}

export interface ShardedStateResult {
  /** The parts' file names in part order, relative to the directory. */
  files: string[];
  parts: ShardedStatePart[];
}

interface OpenPart {
  info: ShardedStatePart;
  handle: FileHandle;
  /** JSON members `"name":{...}` of the header so far. */
  members: string[];
  /** Length of the header JSON if it were closed now. */
  jsonBytes: number;
}

export function shardedStateFileName(rank: number, part: number): string {
  return `model-rank-${rank}-part-${part}.safetensors`;
}

const FILE_NAME_PATTERN = /^model-rank-(\d+)-part-(\d+)\.safetensors$/;

export class ShardedStateWriter {
  readonly dir: string;
  readonly rank: number;
  private readonly partBytesMax: number;
  private readonly headerBytesReserve: number;
  private readonly metadataJson: string;
  private readonly signal: AbortSignal | undefined;
  private readonly closed: ShardedStatePart[] = [];
  private readonly names = new Set<string>();
  private current: OpenPart | undefined;
  private state: 'open' | 'busy' | 'finished' | 'failed' = 'open';

  constructor(dir: string, rank: number, options: ShardedStateWriterOptions = {}) {
    const partBytesMax = options.partBytesMax ?? PART_BYTES_MAX_DEFAULT;
    if (!Number.isSafeInteger(rank) || rank < 0) {
      throw new WeightcastError('USAGE', `sharded-state rank must be a non-negative integer, not ${rank}`);
    }
    if (!Number.isSafeInteger(partBytesMax) || partBytesMax < 1) {
      throw new WeightcastError('USAGE', `partBytesMax must be a positive integer, not ${partBytesMax}`);
    }
    const reserve =
      options.headerBytesReserve ??
      Math.min(HEADER_RESERVE_MAX, Math.max(HEADER_RESERVE_MIN, Math.floor(partBytesMax / 1024)));
    if (!Number.isSafeInteger(reserve) || reserve < 64) {
      throw new WeightcastError('USAGE', `headerBytesReserve must be an integer >= 64, not ${reserve}`);
    }
    this.dir = dir;
    this.rank = rank;
    this.partBytesMax = partBytesMax;
    this.headerBytesReserve = roundUp(reserve, HEADER_ALIGNMENT_BYTES);
    this.metadataJson = JSON.stringify(options.metadata ?? { format: 'pt' });
    this.signal = options.signal;
  }

  /** Parts closed so far and the open one, for progress reports. */
  get partCount(): number {
    return this.closed.length + (this.current === undefined ? 0 : 1);
  }

  /**
   * Appends one whole tensor. `bytes` is written before the promise resolves and not kept, so the
   * caller may reuse it afterwards. Calls must not overlap.
   */
  async add(
    name: string,
    dtype: Dtype,
    shape: readonly number[],
    bytes: Uint8Array,
    options: { signal?: AbortSignal } = {},
  ): Promise<void> {
    this.enter('add');
    try {
      throwIfAborted(options.signal ?? this.signal, `writing sharded-state tensor ${name}`);
      this.checkTensor(name, dtype, shape, bytes);
      const member = `${JSON.stringify(name)}:`;
      let part = this.current;
      if (part !== undefined && !this.fits(part, member, dtype, shape, bytes.length)) {
        await this.closePart(part);
        part = undefined;
      }
      part ??= await this.openPart();
      if (!this.fits(part, member, dtype, shape, bytes.length)) {
        throw new WeightcastError(
          'LIMIT_EXCEEDED',
          `sharded-state tensor ${name}: its header entry does not fit in the ${this.headerBytesReserve}-byte header reserve`,
          { tensor: name },
        );
      }
      const begin = part.info.dataBytes;
      const end = begin + bytes.length;
      await writeAll(part.handle, bytes, this.headerBytesReserve + begin);
      const text = member + JSON.stringify({ dtype, shape, data_offsets: [begin, end] });
      part.members.push(text);
      part.jsonBytes += Buffer.byteLength(text, 'utf8') + 1;
      part.info.tensors.push(name);
      part.info.dataBytes = end;
      part.info.fileBytes = this.headerBytesReserve + end;
      this.names.add(name);
      this.state = 'open';
    } catch (error) {
      this.state = 'failed';
      throw asIoError(error, `writing sharded-state tensor ${name}`);
    }
  }

  /** Closes the last part and renames every part to its final name. */
  async finish(options: { signal?: AbortSignal } = {}): Promise<ShardedStateResult> {
    this.enter('finish');
    try {
      throwIfAborted(options.signal ?? this.signal, 'finishing sharded-state files');
      // A rank with no tensors (possible in uneven or expert-parallel plans) still gets part 0, so
      // the loader finds a file for every rank.
      this.current ??= await this.openPart();
      await this.closePart(this.current);
      for (const part of this.closed) {
        await rename(join(this.dir, part.file + PARTIAL_SUFFIX), join(this.dir, part.file));
      }
      await this.removeStaleParts();
      this.state = 'finished';
      return { files: this.closed.map((p) => p.file), parts: this.closed.map((p) => ({ ...p })) };
    } catch (error) {
      this.state = 'failed';
      throw asIoError(error, 'finishing sharded-state files');
    }
  }

  /** Closes and removes every partial file; final names written by an earlier run are untouched. */
  async abandon(): Promise<void> {
    const open = this.current;
    this.current = undefined;
    if (open !== undefined) {
      await open.handle.close().catch(() => undefined);
      this.closed.push(open.info);
    }
    if (this.state !== 'finished') {
      for (const part of this.closed) {
        await rm(join(this.dir, part.file + PARTIAL_SUFFIX), { force: true });
      }
    }
    this.state = 'failed';
  }

  private enter(what: string): void {
    if (this.state !== 'open') {
      throw new WeightcastError('USAGE', `sharded-state writer: ${what} called while ${this.state}`);
    }
    this.state = 'busy';
  }

  private checkTensor(name: string, dtype: Dtype, shape: readonly number[], bytes: Uint8Array): void {
    if (name === '__metadata__' || name.length === 0 || this.names.has(name)) {
      throw new WeightcastError(
        'SAFETENSORS_DUPLICATE_TENSOR',
        `sharded-state tensor name ${JSON.stringify(name)} is used twice or reserved`,
        {
          tensor: name,
        },
      );
    }
    if (!shape.every((dim) => Number.isSafeInteger(dim) && dim >= 0)) {
      throw new WeightcastError(
        'SAFETENSORS_INVALID_TENSOR_INFO',
        `sharded-state tensor ${name}: bad shape ${JSON.stringify(shape)}`,
        {
          tensor: name,
        },
      );
    }
    const bits = tensorBits(dtype, shape);
    if (bits % 8n !== 0n || bits / 8n !== BigInt(bytes.length)) {
      throw new WeightcastError(
        'SAFETENSORS_WRITE_MISMATCH',
        `sharded-state tensor ${name}: ${bytes.length} bytes given for ${dtype} ${JSON.stringify(shape)}`,
        { tensor: name },
      );
    }
  }

  private fits(
    part: OpenPart,
    member: string,
    dtype: Dtype,
    shape: readonly number[],
    length: number,
  ): boolean {
    if (part.info.tensors.length > 0 && part.info.dataBytes + length > this.partBytesMax) return false;
    const begin = part.info.dataBytes;
    const entry = member + JSON.stringify({ dtype, shape, data_offsets: [begin, begin + length] });
    const jsonBytes = part.jsonBytes + Buffer.byteLength(entry, 'utf8') + 1;
    return LENGTH_PREFIX_BYTES + jsonBytes <= this.headerBytesReserve;
  }

  private async openPart(): Promise<OpenPart> {
    const number = this.closed.length;
    const file = shardedStateFileName(this.rank, number);
    await mkdir(this.dir, { recursive: true });
    const handle = await open(join(this.dir, file + PARTIAL_SUFFIX), 'w');
    const members = [`"__metadata__":${this.metadataJson}`];
    // `{` + members joined by `,` + `}`: count the braces now and one comma per later member.
    const jsonBytes = 2 + Buffer.byteLength(members[0] ?? '', 'utf8');
    const info: ShardedStatePart = {
      file,
      part: number,
      tensors: [],
      dataBytes: 0,
      fileBytes: this.headerBytesReserve,
    };
    this.current = { info, handle, members, jsonBytes };
    return this.current;
  }

  private async closePart(part: OpenPart): Promise<void> {
    assert(this.current === part, 'only the open part is closed');
    const json = Buffer.from(`{${part.members.join(',')}}`, 'utf8');
    const headerLength = this.headerBytesReserve - LENGTH_PREFIX_BYTES;
    assert(json.length <= headerLength, 'sharded-state header fits its reserve');
    const header = Buffer.alloc(this.headerBytesReserve, 0x20);
    header.writeBigUInt64LE(BigInt(headerLength), 0);
    json.copy(header, LENGTH_PREFIX_BYTES);
    this.current = undefined;
    try {
      await writeAll(part.handle, header, 0);
      // An empty part still has its full reserve, so the file size always matches the header.
      await part.handle.truncate(part.info.fileBytes);
    } finally {
      await part.handle.close();
    }
    this.closed.push(part.info);
  }

  private async removeStaleParts(): Promise<void> {
    const entries = await readdir(this.dir);
    for (const entry of entries) {
      const match = FILE_NAME_PATTERN.exec(entry);
      if (match === null || Number(match[1]) !== this.rank) continue;
      if (Number(match[2]) >= this.closed.length) await rm(join(this.dir, entry), { force: true });
    }
  }
}

async function writeAll(handle: FileHandle, bytes: Uint8Array, position: number): Promise<void> {
  let done = 0;
  while (done < bytes.length) {
    const { bytesWritten } = await handle.write(bytes, done, bytes.length - done, position + done);
    done += bytesWritten;
  }
}

function roundUp(value: number, multiple: number): number {
  return Math.ceil(value / multiple) * multiple;
}
