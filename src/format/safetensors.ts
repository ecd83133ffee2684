/**
 * Reads and validates safetensors headers the way the reference implementation does
 * (huggingface/safetensors, `safetensors/src/tensor.rs`, `SafeTensors::read_metadata`), so that a file
 * weightcast accepts is one every safetensors loader accepts. A file is an 8-byte little-endian header
 * length N, N bytes of UTF-8 JSON, then the data buffer, which the tensors' `data_offsets` must cover
 * exactly: in order, without gaps or overlaps, to the last byte of the file.
 *
 * The reference decodes the JSON with serde_json into typed structs. Where that is stricter than
 * `JSON.parse` (an integer written `1.0`, duplicated fields, unpaired surrogate escapes, floats that
 * overflow, deep nesting), this module checks the raw text (see json-keys.ts). It is stricter than the
 * reference in one place: a tensor name used twice, which serde silently resolves to the last entry,
 * is rejected, as the format's README requires.
 *
 * Reading takes two ranged reads (8 bytes, then N bytes), so the same code serves files and HTTP.
 */

import { open, type FileHandle } from 'node:fs/promises';
import { WeightcastError, throwIfAborted, type ErrorCode } from '../errors.js';
import { DTYPE_BITS, isDtype, type Dtype } from './dtype.js';
import {
  decodeStringLiteral,
  hasUnpairedSurrogate,
  scanArrayElements,
  scanObjectMembers,
  serdeJsonProblem,
  skipJsonWhitespace,
  type JsonMember,
} from './json-keys.js';

export const HEADER_BYTES_MAX = 100_000_000;
/** The header length that opens every file. */
export const LENGTH_PREFIX_BYTES = 8;
export const METADATA_KEY = '__metadata__';

/** The reference reads shapes and offsets as 64-bit integers and rejects anything larger. */
const U64_MAX = 2n ** 64n - 1n;
const U64_DIGITS_MAX = String(U64_MAX).length;
const SAFE_INTEGER_MAX = BigInt(Number.MAX_SAFE_INTEGER);
const OPEN_BRACE = 0x7b;
const OPEN_BRACKET = 0x5b;
const QUOTE = 0x22;
/** JSON's grammar already forbids leading zeros, so digits alone make a non-negative integer. */
const DIGITS = /^[0-9]+$/;
// ignoreBOM keeps a leading byte order mark in the text, so that it is refused as serde_json refuses it.
const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

export interface TensorEntry {
  name: string;
  dtype: Dtype;
  shape: number[];
  /** As written in the header: relative to the start of the data buffer. */
  dataOffsets: [number, number];
  /** Absolute file offsets of the tensor's bytes, end exclusive. */
  start: number;
  end: number;
}

export interface SafetensorsHeader {
  file: string;
  /** N, the JSON header's length in bytes, padding included. */
  headerLength: number;
  /** Absolute offset of the data buffer: 8 + N. */
  dataStart: number;
  fileSize: number;
  /** Sorted by offset, the order their bytes appear in the file. */
  tensors: TensorEntry[];
  metadata: Record<string, string> | null;
}

export type RangeRead = (offset: number, length: number, signal?: AbortSignal) => Promise<Uint8Array>;

/** A tensor as declared, before its layout is checked; bigint so that absurd values stay exact. */
interface DeclaredTensor {
  name: string;
  dtype: Dtype;
  shape: bigint[];
  begin: bigint;
  end: bigint;
}

function fail(code: ErrorCode, file: string, problem: string, tensor?: string): WeightcastError {
  if (tensor === undefined) return new WeightcastError(code, `${file}: ${problem}`, { file });
  return new WeightcastError(code, `${file}: tensor ${JSON.stringify(tensor)}: ${problem}`, { file, tensor });
}

/** Decodes and checks the 8-byte prefix; returns N. */
export function readHeaderLength(prefix: Uint8Array, fileSize: number, file: string): number {
  const available = Math.min(prefix.length, fileSize);
  if (available < LENGTH_PREFIX_BYTES) throw tooShort(available, file);
  const length = new DataView(prefix.buffer, prefix.byteOffset, LENGTH_PREFIX_BYTES).getBigUint64(0, true);
  if (length > BigInt(HEADER_BYTES_MAX)) {
    throw fail(
      'SAFETENSORS_HEADER_TOO_LARGE',
      file,
      `header length ${length} is over ${HEADER_BYTES_MAX} bytes`,
    );
  }
  checkHeaderFits(Number(length), fileSize, file);
  return Number(length);
}

function tooShort(bytes: number, file: string): WeightcastError {
  return fail('SAFETENSORS_HEADER_TOO_SMALL', file, `${bytes} bytes, too short for the 8-byte header length`);
}

function checkHeaderFits(headerLength: number, fileSize: number, file: string): void {
  if (headerLength > HEADER_BYTES_MAX) {
    throw fail(
      'SAFETENSORS_HEADER_TOO_LARGE',
      file,
      `header of ${headerLength} bytes is over ${HEADER_BYTES_MAX}`,
    );
  }
  if (LENGTH_PREFIX_BYTES + headerLength > fileSize) {
    throw fail(
      'SAFETENSORS_INVALID_HEADER_LENGTH',
      file,
      `header length ${headerLength} runs past the end of the ${fileSize}-byte file`,
    );
  }
}

/** Validates the N header bytes against a file of `fileSize` bytes. */
export function parseSafetensorsHeader(
  headerBytes: Uint8Array,
  fileSize: number,
  file: string,
): SafetensorsHeader {
  checkHeaderFits(headerBytes.length, fileSize, file);
  const text = decodeUtf8(headerBytes, file);
  const { declared, metadata } = readMembers(text, topLevelMembers(text, file), file);
  const dataStart = LENGTH_PREFIX_BYTES + headerBytes.length;
  const tensors = layOut(declared, dataStart, fileSize, file);
  return { file, headerLength: headerBytes.length, dataStart, fileSize, tensors, metadata };
}

/** Two ranged reads: 8 bytes, then N bytes. Works for files and HTTP alike. */
export async function readSafetensorsHeader(
  read: RangeRead,
  fileSize: number,
  file: string,
  options: { signal?: AbortSignal } = {},
): Promise<SafetensorsHeader> {
  const { signal } = options;
  // Said before any read, with the file's own size (it was read as an empty prefix: "0 bytes").
  if (fileSize < LENGTH_PREFIX_BYTES) throw tooShort(fileSize, file);
  const prefix = await readExactly(read, 0, LENGTH_PREFIX_BYTES, file, signal);
  const headerLength = readHeaderLength(prefix, fileSize, file);
  // An empty header is invalid JSON; skipping the read spares origins a zero-length range request.
  const headerBytes =
    headerLength === 0
      ? new Uint8Array(0)
      : await readExactly(read, LENGTH_PREFIX_BYTES, headerLength, file, signal);
  return parseSafetensorsHeader(headerBytes, fileSize, file);
}

export async function readSafetensorsHeaderFromFile(
  path: string,
  options: { signal?: AbortSignal } = {},
): Promise<SafetensorsHeader> {
  try {
    const handle = await open(path, 'r');
    try {
      const { size } = await handle.stat();
      return await readSafetensorsHeader(
        (offset, length) => readFileRange(handle, offset, length),
        size,
        path,
        options,
      );
    } finally {
      await handle.close();
    }
  } catch (error) {
    if (error instanceof WeightcastError) throw error;
    const reason = error instanceof Error ? error.message : String(error);
    throw new WeightcastError('IO', `${path}: cannot read: ${reason}`, { file: path }, { cause: error });
  }
}

/** Validates a whole file held in memory. */
export function parseSafetensorsBuffer(buffer: Uint8Array, file: string): SafetensorsHeader {
  const headerLength = readHeaderLength(buffer.subarray(0, LENGTH_PREFIX_BYTES), buffer.length, file);
  const headerEnd = LENGTH_PREFIX_BYTES + headerLength;
  return parseSafetensorsHeader(buffer.subarray(LENGTH_PREFIX_BYTES, headerEnd), buffer.length, file);
}

async function readExactly(
  read: RangeRead,
  offset: number,
  length: number,
  file: string,
  signal: AbortSignal | undefined,
): Promise<Uint8Array> {
  throwIfAborted(signal, `reading the header of ${file}`);
  const bytes = await read(offset, length, signal);
  if (bytes.length !== length) {
    throw fail(
      'SAFETENSORS_TRUNCATED',
      file,
      `read of ${length} bytes at ${offset} returned ${bytes.length}`,
    );
  }
  return bytes;
}

async function readFileRange(handle: FileHandle, offset: number, length: number): Promise<Uint8Array> {
  const buffer = Buffer.alloc(length);
  let filled = 0;
  while (filled < length) {
    const { bytesRead } = await handle.read(buffer, filled, length - filled, offset + filled);
    if (bytesRead === 0) break;
    filled += bytesRead;
  }
  return buffer.subarray(0, filled);
}

function decodeUtf8(bytes: Uint8Array, file: string): string {
  try {
    return utf8.decode(bytes);
  } catch (error) {
    throw new WeightcastError(
      'SAFETENSORS_INVALID_UTF8',
      `${file}: header is not valid UTF-8`,
      { file },
      { cause: error },
    );
  }
}

/**
 * The reference lets JSON whitespace pad the header on both sides (writers may align the data buffer
 * that way), so the object starts at the first non-whitespace character, which must be `{`.
 */
function topLevelMembers(text: string, file: string): JsonMember[] {
  const start = skipJsonWhitespace(text, 0);
  if (start === text.length) throw fail('SAFETENSORS_INVALID_JSON', file, 'header is empty');
  if (text.charCodeAt(start) !== OPEN_BRACE) {
    const found = JSON.stringify(text.charAt(start));
    throw fail(
      'SAFETENSORS_INVALID_HEADER_START',
      file,
      `header must be a JSON object, starts with ${found}`,
    );
  }
  try {
    JSON.parse(text);
  } catch (error) {
    const reason = error instanceof Error ? error.message : String(error);
    throw new WeightcastError(
      'SAFETENSORS_INVALID_JSON',
      `${file}: header is not valid JSON: ${reason}`,
      { file },
      { cause: error },
    );
  }
  return scanObjectMembers(text, start);
}

function readMembers(
  text: string,
  members: readonly JsonMember[],
  file: string,
): { declared: DeclaredTensor[]; metadata: Record<string, string> | null } {
  const names = new Set<string>();
  const declared: DeclaredTensor[] = [];
  let metadata: Record<string, string> | null = null;
  for (const member of members) {
    if (names.has(member.key)) {
      if (member.key === METADATA_KEY) {
        throw fail('SAFETENSORS_INVALID_METADATA', file, `${METADATA_KEY} appears twice`);
      }
      throw fail('SAFETENSORS_DUPLICATE_TENSOR', file, 'name appears twice in the header', member.key);
    }
    names.add(member.key);
    if (member.key === METADATA_KEY) metadata = readMetadata(text, member, file);
    else declared.push(readTensorInfo(text, member, file));
  }
  return { declared, metadata };
}

/** `__metadata__` is null or an object of strings; duplicate keys inside it keep the last, as in serde. */
function readMetadata(text: string, member: JsonMember, file: string): Record<string, string> | null {
  if (text.startsWith('null', member.valueStart)) return null;
  if (text.charCodeAt(member.valueStart) !== OPEN_BRACE) {
    throw fail('SAFETENSORS_INVALID_METADATA', file, `${METADATA_KEY} must be an object of strings`);
  }
  const entries = new Map<string, string>();
  for (const entry of scanObjectMembers(text, member.valueStart)) {
    if (text.charCodeAt(entry.valueStart) !== QUOTE) {
      const key = JSON.stringify(entry.key);
      throw fail('SAFETENSORS_INVALID_METADATA', file, `${METADATA_KEY} value of ${key} is not a string`);
    }
    const value = decodeStringLiteral(text.slice(entry.valueStart, entry.valueEnd));
    if (hasUnpairedSurrogate(entry.key) || hasUnpairedSurrogate(value)) {
      throw fail('SAFETENSORS_INVALID_JSON', file, `${METADATA_KEY} has an unpaired surrogate escape`);
    }
    entries.set(entry.key, value);
  }
  return Object.fromEntries(entries);
}

function readTensorInfo(text: string, member: JsonMember, file: string): DeclaredTensor {
  const name = member.key;
  if (hasUnpairedSurrogate(name)) {
    throw fail('SAFETENSORS_INVALID_JSON', file, 'name has an unpaired surrogate escape', name);
  }
  if (text.charCodeAt(member.valueStart) !== OPEN_BRACE) {
    throw fail(
      'SAFETENSORS_INVALID_TENSOR_INFO',
      file,
      'entry must be an object: dtype, shape, data_offsets',
      name,
    );
  }
  const fields = readTensorFields(text, member, file);
  const dtype = readDtype(text, requireField(fields, 'dtype', file, name), file, name);
  const shape = readUnsignedArray(text, requireField(fields, 'shape', file, name), file, name);
  const offsets = readUnsignedArray(text, requireField(fields, 'data_offsets', file, name), file, name);
  const [begin, end] = offsets;
  if (offsets.length !== 2 || begin === undefined || end === undefined) {
    throw fail('SAFETENSORS_INVALID_TENSOR_INFO', file, 'data_offsets must be [begin, end]', name);
  }
  return { name, dtype, shape, begin, end };
}

type TensorFields = Record<'dtype' | 'shape' | 'data_offsets', JsonMember | undefined>;

/** Like serde's derived struct reader: known fields at most once, unknown ones decoded and dropped. */
function readTensorFields(text: string, member: JsonMember, file: string): TensorFields {
  const fields: TensorFields = { dtype: undefined, shape: undefined, data_offsets: undefined };
  for (const field of scanObjectMembers(text, member.valueStart)) {
    const key = field.key;
    if (key !== 'dtype' && key !== 'shape' && key !== 'data_offsets') {
      checkIgnoredField(text, field, file, member.key);
    } else if (fields[key] !== undefined) {
      throw fail('SAFETENSORS_INVALID_TENSOR_INFO', file, `field ${key} appears twice`, member.key);
    } else {
      fields[key] = field;
    }
  }
  return fields;
}

function requireField(fields: TensorFields, key: keyof TensorFields, file: string, name: string): JsonMember {
  const field = fields[key];
  if (field === undefined) {
    throw fail('SAFETENSORS_INVALID_TENSOR_INFO', file, `field ${key} is missing`, name);
  }
  return field;
}

/** Unknown fields are ignored by the reference, but serde_json still decodes them and may refuse. */
function checkIgnoredField(text: string, field: JsonMember, file: string, name: string): void {
  // The top-level object and the tensor entry are the two containers around the field's value.
  const problem = hasUnpairedSurrogate(field.key)
    ? 'has an unpaired surrogate escape'
    : serdeJsonProblem(text, field.valueStart, field.valueEnd, 2);
  if (problem !== undefined) {
    throw fail('SAFETENSORS_INVALID_JSON', file, `field ${JSON.stringify(field.key)} ${problem}`, name);
  }
}

function readDtype(text: string, field: JsonMember, file: string, name: string): Dtype {
  if (text.charCodeAt(field.valueStart) !== QUOTE) {
    throw fail('SAFETENSORS_INVALID_TENSOR_INFO', file, 'dtype must be a string', name);
  }
  const dtype = decodeStringLiteral(text.slice(field.valueStart, field.valueEnd));
  if (!isDtype(dtype)) {
    throw fail('SAFETENSORS_UNKNOWN_DTYPE', file, `unknown dtype ${JSON.stringify(dtype)}`, name);
  }
  return dtype;
}

/** `shape` and `data_offsets`: arrays of integer literals that fit in 64 bits, as serde reads `usize`. */
function readUnsignedArray(text: string, field: JsonMember, file: string, name: string): bigint[] {
  if (text.charCodeAt(field.valueStart) !== OPEN_BRACKET) throw notUnsignedArray(text, field, file, name);
  const values: bigint[] = [];
  for (const [start, end] of scanArrayElements(text, field.valueStart)) {
    const literal = text.slice(start, end);
    if (!DIGITS.test(literal) || literal.length > U64_DIGITS_MAX) {
      throw notUnsignedArray(text, field, file, name);
    }
    const value = BigInt(literal);
    if (value > U64_MAX) throw notUnsignedArray(text, field, file, name);
    values.push(value);
  }
  return values;
}

function notUnsignedArray(text: string, field: JsonMember, file: string, name: string): WeightcastError {
  const found = text.slice(field.valueStart, Math.min(field.valueEnd, field.valueStart + 200));
  const problem = `${field.key} must be an array of integers from 0 to 2^64-1, got ${found}`;
  return fail('SAFETENSORS_INVALID_TENSOR_INFO', file, problem, name);
}

/**
 * Sorts by offsets as the reference does (ties keep header order: the sort is stable), then walks the
 * data buffer front to back. Every tensor must begin where the previous one ended and be exactly as
 * long as its dtype and shape say; the last one must end at the end of the file.
 */
function layOut(
  declared: DeclaredTensor[],
  dataStart: number,
  fileSize: number,
  file: string,
): TensorEntry[] {
  const sorted = [...declared].sort(compareOffsets);
  let cursor = 0n;
  let previous: DeclaredTensor | undefined;
  for (const tensor of sorted) {
    checkOffsets(tensor, cursor, previous, file);
    checkByteSize(tensor, file);
    cursor = tensor.end;
    previous = tensor;
  }
  checkCoverage(sorted, BigInt(fileSize - dataStart), file);
  return sorted.map((tensor) => toEntry(tensor, dataStart, file));
}

function compareOffsets(a: DeclaredTensor, b: DeclaredTensor): number {
  if (a.begin !== b.begin) return a.begin < b.begin ? -1 : 1;
  if (a.end !== b.end) return a.end < b.end ? -1 : 1;
  return 0;
}

function checkOffsets(
  tensor: DeclaredTensor,
  cursor: bigint,
  previous: DeclaredTensor | undefined,
  file: string,
): void {
  if (tensor.begin === cursor && tensor.end >= tensor.begin) return;
  const offsets = `data_offsets [${tensor.begin}, ${tensor.end}]`;
  const before = previous === undefined ? 'the start of the data' : `tensor ${JSON.stringify(previous.name)}`;
  let problem: string;
  if (tensor.end < tensor.begin) problem = `${offsets} end before they begin`;
  else if (tensor.begin > cursor)
    problem = `${offsets} leave a gap of ${tensor.begin - cursor} bytes after ${before}`;
  else problem = `${offsets} overlap ${before}, which ends at ${cursor}`;
  throw fail('SAFETENSORS_INVALID_OFFSET', file, problem, tensor.name);
}

/** Mirrors the reference's checked arithmetic in 64 bits, then our own limit of exact JS numbers. */
function checkByteSize(tensor: DeclaredTensor, file: string): void {
  const problem = (code: ErrorCode, what: string): WeightcastError =>
    fail(code, file, `${tensor.dtype} [${tensor.shape.join(', ')}] ${what}`, tensor.name);
  let elements = 1n;
  for (const dim of tensor.shape) {
    elements *= dim;
    if (elements > U64_MAX) throw problem('SAFETENSORS_OVERFLOW', 'has over 2^64 elements');
  }
  const bits = elements * BigInt(DTYPE_BITS[tensor.dtype]);
  if (bits > U64_MAX) throw problem('SAFETENSORS_OVERFLOW', 'has over 2^64 bits');
  if (bits % 8n !== 0n) throw problem('SAFETENSORS_MISALIGNED_SLICE', `is ${bits} bits, not whole bytes`);
  const bytes = bits / 8n;
  if (bytes > SAFE_INTEGER_MAX) throw problem('SAFETENSORS_OVERFLOW', `is ${bytes} bytes, over 2^53-1`);
  if (bytes !== tensor.end - tensor.begin) {
    const held = `data_offsets [${tensor.begin}, ${tensor.end}] hold ${tensor.end - tensor.begin}`;
    throw problem('SAFETENSORS_TENSOR_SIZE_MISMATCH', `needs ${bytes} bytes but ${held}`);
  }
}

function checkCoverage(sorted: readonly DeclaredTensor[], dataBytes: bigint, file: string): void {
  const covered = sorted.at(-1)?.end ?? 0n;
  if (covered > dataBytes) {
    const cut = sorted.find((tensor) => tensor.end > dataBytes);
    const problem = `the data buffer has ${dataBytes} bytes but the tensors need ${covered}`;
    throw fail('SAFETENSORS_TRUNCATED', file, `file is truncated: ${problem}`, cut?.name);
  }
  if (covered < dataBytes) {
    const trailing = dataBytes - covered;
    throw fail(
      'SAFETENSORS_INCOMPLETE_BUFFER',
      file,
      `${trailing} bytes after the last tensor belong to no tensor`,
    );
  }
}

function toEntry(tensor: DeclaredTensor, dataStart: number, file: string): TensorEntry {
  const shape = tensor.shape.map((dim) => {
    // Only an empty tensor can get here with such a dimension; we cannot represent it exactly.
    if (dim > SAFE_INTEGER_MAX) {
      throw fail('SAFETENSORS_OVERFLOW', file, `dimension ${dim} is over 2^53-1`, tensor.name);
    }
    return Number(dim);
  });
  const begin = Number(tensor.begin);
  const end = Number(tensor.end);
  return {
    name: tensor.name,
    dtype: tensor.dtype,
    shape,
    dataOffsets: [begin, end],
    start: dataStart + begin,
    end: dataStart + end,
  };
}
