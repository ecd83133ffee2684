/**
 * Turns read requests into read groups: the unit of memory and of delivery. Pure, no I/O.
 *
 * Requests of one file are sorted by offset and packed into groups of at most `groupBytes` (a larger
 * tensor is a group of its own). A group owns one contiguous buffer; a request whose ranges lie in it
 * is delivered as a view of that buffer, without copying.
 *
 * With piece digests to verify against, whole pieces must be read and hashed. Each piece is read
 * exactly once, into the buffer of the group in which it starts: a group's buffer runs to the end of
 * its last piece, so it also holds the first bytes of the next group. The next group's buffer starts
 * at its own first byte and gets those head bytes by copy once the piece has been verified
 * (`headBytes`, at most one piece). A group therefore never waits for a later group, only for an
 * earlier one of the same file, which always exists first: no cycle, no deadlock under a budget.
 *
 * Without digests, groups are exactly the requested bytes, read in chunks of at most `readBytes`.
 * With `exactReads` (and no digests) only the requested ranges are read, not the gaps between them
 * inside a group: a strided slice then costs its own bytes, though its buffer still spans the gaps.
 */

import { WeightcastError } from '../../errors.js';
import type { ByteRange, ModelFile, ReadRequest } from './types.js';

export interface PlannedRead {
  /** File offset and length; lands at `start - group.bufStart` in the group's buffer. */
  start: number;
  length: number;
  /** Index into the group's `pieces`, or -1 when nothing is verified. */
  piece: number;
}

export interface PlannedPiece {
  index: number;
  start: number;
  end: number;
  digest: string;
  reads: number;
}

export interface PlannedItem<T> {
  request: ReadRequest<T>;
  /** Where the request's ranges lie in the group's buffer. */
  fragments: Array<{ offset: number; length: number }>;
  bytes: number;
}

export interface PlannedGroup<T> {
  file: string;
  fileIndex: number;
  /** File offsets covered by the buffer. */
  bufStart: number;
  bufEnd: number;
  /** Bytes at the front of the buffer copied from the previous group of the same file. */
  headBytes: number;
  reads: PlannedRead[];
  pieces: PlannedPiece[];
  items: Array<PlannedItem<T>>;
}

export interface ReadPlan<T> {
  /** Per file, in file order; groups of one file in offset order. */
  files: Array<Array<PlannedGroup<T>>>;
  /** Requests with no bytes at all: delivered at once. */
  empty: Array<ReadRequest<T>>;
  /** Bytes the plan reads (whole pieces when verifying). */
  bytesToRead: number;
  /** Arena bytes the groups' buffers need in all (less heads copied in); equals bytesToRead unless `exactReads`. */
  bufferBytes: number;
  bytesRequested: number;
}

export interface PlanOptions {
  /** Piece size of the digests in `ModelFile.pieces`; required when any file has digests. */
  pieceSize?: number;
  groupBytes: number;
  readBytes: number;
  /** Requests further apart than this start a new group rather than read the gap. */
  gapBytesMax: number;
  /** Without digests: read only the requested ranges, never the gaps between them. */
  exactReads?: boolean;
}

interface RawGroup<T> {
  rawStart: number;
  rawEnd: number;
  items: Array<ReadRequest<T>>;
}

export function planReads<T>(
  files: readonly ModelFile[],
  requests: readonly ReadRequest<T>[],
  options: PlanOptions,
): ReadPlan<T> {
  const byPath = new Map(files.map((file, index) => [file.path, { file, index }]));
  const perFile = files.map(() => [] as Array<ReadRequest<T>>);
  const empty: Array<ReadRequest<T>> = [];
  let bytesRequested = 0;
  for (const request of requests) {
    const entry = byPath.get(request.file);
    if (entry === undefined) {
      throw new WeightcastError('LOADER_INVALID_REQUEST', `${request.file} is not a file of the model`, {
        file: request.file,
      });
    }
    const bytes = checkRanges(request, entry.file.size);
    bytesRequested += bytes;
    if (bytes === 0) empty.push(request);
    else (perFile[entry.index] as Array<ReadRequest<T>>).push(request);
  }
  let bytesToRead = 0;
  let bufferBytes = 0;
  const planned = files.map((file, fileIndex) => {
    const raw = packGroups(perFile[fileIndex] as Array<ReadRequest<T>>, options);
    const groups = layOutGroups(file, fileIndex, raw, options);
    for (const group of groups) {
      bufferBytes += group.bufEnd - group.bufStart - group.headBytes;
      bytesToRead += group.reads.reduce((sum, read) => sum + read.length, 0);
    }
    return groups;
  });
  return { files: planned, empty, bytesToRead, bufferBytes, bytesRequested };
}

/** Validates a request's ranges against the file; returns its byte count. */
function checkRanges<T>(request: ReadRequest<T>, size: number): number {
  let previousEnd = 0;
  let bytes = 0;
  for (const range of request.ranges) {
    const valid =
      Number.isSafeInteger(range.start) &&
      Number.isSafeInteger(range.end) &&
      range.start >= previousEnd &&
      range.end >= range.start &&
      range.end <= size;
    if (!valid) {
      throw new WeightcastError(
        'LOADER_INVALID_REQUEST',
        `${request.file}: range [${range.start}, ${range.end}) is out of order, reversed or outside the file's ${size} bytes`,
        { file: request.file },
      );
    }
    previousEnd = range.end;
    bytes += range.end - range.start;
  }
  return bytes;
}

function span<T>(request: ReadRequest<T>): ByteRange {
  const ranges = request.ranges.filter((range) => range.end > range.start);
  return { start: (ranges[0] as ByteRange).start, end: (ranges.at(-1) as ByteRange).end };
}

function packGroups<T>(requests: Array<ReadRequest<T>>, options: PlanOptions): Array<RawGroup<T>> {
  const sorted = [...requests].sort((a, b) => span(a).start - span(b).start);
  const groups: Array<RawGroup<T>> = [];
  let current: RawGroup<T> | undefined;
  for (const request of sorted) {
    const { start, end } = span(request);
    if (current !== undefined && start < current.rawEnd) {
      throw new WeightcastError(
        'LOADER_INVALID_REQUEST',
        `${request.file}: requests overlap at byte ${start}`,
        { file: request.file },
      );
    }
    // A group only grows while it stays within groupBytes: a large request starts a group of its own.
    const joins =
      current !== undefined &&
      end - current.rawStart <= options.groupBytes &&
      start - current.rawEnd <= options.gapBytesMax;
    if (current !== undefined && joins) {
      current.rawEnd = end;
      current.items.push(request);
    } else {
      current = { rawStart: start, rawEnd: end, items: [request] };
      groups.push(current);
    }
  }
  return groups;
}

function layOutGroups<T>(
  file: ModelFile,
  fileIndex: number,
  raw: Array<RawGroup<T>>,
  options: PlanOptions,
): Array<PlannedGroup<T>> {
  const pieceSize = file.pieces === undefined ? undefined : options.pieceSize;
  if (file.pieces !== undefined && pieceSize === undefined) {
    throw new WeightcastError('LOADER_INVALID_REQUEST', `${file.path}: piece digests without a piece size`, {
      file: file.path,
    });
  }
  const groups: Array<PlannedGroup<T>> = [];
  for (const rawGroup of raw) {
    const previous = groups.at(-1);
    if (pieceSize === undefined) {
      groups.push(newGroup(file, fileIndex, rawGroup, rawGroup.rawStart, rawGroup.rawEnd, 0));
      continue;
    }
    const bufEnd = Math.min(file.size, Math.ceil(rawGroup.rawEnd / pieceSize) * pieceSize);
    if (previous !== undefined && previous.bufEnd > rawGroup.rawStart) {
      // The previous group's last piece already holds this group's first bytes.
      if (rawGroup.rawEnd <= previous.bufEnd) {
        previous.items.push(...rawGroup.items.map((request) => placeItem(request, previous.bufStart)));
        continue;
      }
      const headBytes = previous.bufEnd - rawGroup.rawStart;
      groups.push(newGroup(file, fileIndex, rawGroup, rawGroup.rawStart, bufEnd, headBytes));
    } else {
      const bufStart = Math.floor(rawGroup.rawStart / pieceSize) * pieceSize;
      groups.push(newGroup(file, fileIndex, rawGroup, bufStart, bufEnd, 0));
    }
  }
  for (const group of groups) {
    if (pieceSize === undefined && options.exactReads === true) addExactReads(group, options.readBytes);
    else addReads(group, file, pieceSize, options.readBytes);
  }
  return groups;
}

function newGroup<T>(
  file: ModelFile,
  fileIndex: number,
  raw: RawGroup<T>,
  bufStart: number,
  bufEnd: number,
  headBytes: number,
): PlannedGroup<T> {
  return {
    file: file.path,
    fileIndex,
    bufStart,
    bufEnd,
    headBytes,
    reads: [],
    pieces: [],
    items: raw.items.map((request) => placeItem(request, bufStart)),
  };
}

function placeItem<T>(request: ReadRequest<T>, bufStart: number): PlannedItem<T> {
  const fragments = request.ranges
    .filter((range) => range.end > range.start)
    .map((range) => ({ offset: range.start - bufStart, length: range.end - range.start }));
  return { request, fragments, bytes: fragments.reduce((sum, f) => sum + f.length, 0) };
}

/** Reads cover the buffer after its head: whole pieces when verifying, else plain chunks. */
function addReads<T>(
  group: PlannedGroup<T>,
  file: ModelFile,
  pieceSize: number | undefined,
  readBytes: number,
): void {
  const from = group.bufStart + group.headBytes;
  if (pieceSize === undefined || file.pieces === undefined) {
    for (let start = from; start < group.bufEnd; start += readBytes) {
      group.reads.push({ start, length: Math.min(readBytes, group.bufEnd - start), piece: -1 });
    }
    return;
  }
  for (let start = from; start < group.bufEnd; start += pieceSize) {
    const index = start / pieceSize;
    const end = Math.min(file.size, start + pieceSize);
    const digest = file.pieces[index];
    if (digest === undefined || !Number.isInteger(index)) {
      throw new WeightcastError(
        'LOADER_INVALID_REQUEST',
        `${file.path}: no digest for the piece at byte ${start}`,
        { file: file.path },
      );
    }
    const piece = group.pieces.length;
    let reads = 0;
    for (let at = start; at < end; at += readBytes) {
      group.reads.push({ start: at, length: Math.min(readBytes, end - at), piece });
      reads++;
    }
    group.pieces.push({ index, start, end, digest, reads });
  }
}

/** Reads of exactly the items' fragments (touching ones merged), each at most `readBytes`. */
function addExactReads<T>(group: PlannedGroup<T>, readBytes: number): void {
  const spans: Array<{ start: number; end: number }> = [];
  for (const item of group.items) {
    for (const fragment of item.fragments) {
      const start = group.bufStart + fragment.offset;
      const end = start + fragment.length;
      const last = spans.at(-1);
      if (last !== undefined && last.end === start) last.end = end;
      else spans.push({ start, end });
    }
  }
  for (const { start, end } of spans) {
    for (let at = start; at < end; at += readBytes) {
      group.reads.push({ start: at, length: Math.min(readBytes, end - at), piece: -1 });
    }
  }
}
