/**
 * The manifest: the content-addressed description of a model. It lists every file (path, size,
 * optional whole-file SHA-256), the piece size, a SHA-256 per piece, a Merkle root per file over
 * its piece digests, and for safetensors files the tensor index. Its canonical encoding (fixed key
 * order, no whitespace, files sorted by path) is what gets hashed: `sha256:<hex>` of those bytes is
 * the model's name everywhere, and the manifest file on disk is exactly those bytes.
 *
 * Manifests come from outside, so `parseManifest` treats them as hostile: schema-checked, paths
 * confined to the model directory, sizes and piece counts consistent, Merkle roots recomputed.
 */

import { createHash } from 'node:crypto';
import { readFile, writeFile } from 'node:fs/promises';
import * as s from '../util/schema.js';
import { WeightcastError, asInputFileError } from '../errors.js';
import { DTYPES, type Dtype } from '../format/dtype.js';
import { parseJsonDocument, schemaCheck } from '../util/json-document.js';
import { safeRelativePathProblem } from '../util/safe-path.js';
import { merkleRoot, merkleRootSteps } from './merkle.js';

export const MANIFEST_FORMAT = 'weightcast-manifest';
export const MANIFEST_VERSION = 1;
/** The largest piece size a manifest gets by default (models of 8 GiB and up). */
export const PIECE_SIZE_DEFAULT = 16 * 1024 * 1024;
/** The smallest piece size a manifest gets by default (models under 256 MiB). */
export const PIECE_SIZE_DEFAULT_MIN = 256 * 1024;
/** A default piece size gives a model at least this many pieces while it is within its bounds. */
export const PIECES_PER_MODEL_TARGET = 512;
export const PIECE_SIZE_MIN = 64 * 1024;
export const PIECE_SIZE_MAX = 1024 * 1024 * 1024;
/**
 * The piece size a model of `totalBytes` gets when none is asked for: a power of two giving at least
 * PIECES_PER_MODEL_TARGET pieces, within 256 KiB..16 MiB. A swarm's start and end each cost about a
 * piece's trip through a link its hosts share, so a small model needs small pieces to fan out (256
 * MiB: 512 KiB; 1 GiB: 2 MiB), while a large one keeps 16 MiB pieces and fewer requests per byte.
 */
export function defaultPieceSize(totalBytes: number): number {
  let size = PIECE_SIZE_DEFAULT;
  while (size > PIECE_SIZE_DEFAULT_MIN && totalBytes / size < PIECES_PER_MODEL_TARGET) size /= 2;
  return size;
}

/** Refuse manifests describing more than this: no real model is near it, a hostile one may be. */
export const MODEL_BYTES_MAX = 2 ** 50;
export const MANIFEST_BYTES_MAX = 512 * 1024 * 1024;
export const FILES_MAX = 100_000;

export interface ManifestTensor {
  name: string;
  dtype: Dtype;
  shape: number[];
  /** Absolute byte range in the file: [start, end). */
  start: number;
  end: number;
}

export interface ManifestFile {
  path: string;
  size: number;
  /** Whole-file SHA-256 (hex), present when the builder was asked for it. */
  sha256?: string;
  merkleRoot: string;
  /** SHA-256 (hex) of each piece; piece i covers [i * pieceSize, min(size, (i + 1) * pieceSize)). */
  pieces: string[];
  tensors?: ManifestTensor[];
}

export interface Manifest {
  pieceSize: number;
  files: ManifestFile[];
}

export function pieceCount(size: number, pieceSize: number): number {
  return Math.ceil(size / pieceSize);
}

export function pieceRange(
  file: { size: number },
  pieceSize: number,
  index: number,
): { start: number; end: number } {
  const start = index * pieceSize;
  return { start, end: Math.min(file.size, start + pieceSize) };
}

export function totalBytes(manifest: Manifest): number {
  return manifest.files.reduce((sum, file) => sum + file.size, 0);
}

export function totalPieces(manifest: Manifest): number {
  return manifest.files.reduce((sum, file) => sum + file.pieces.length, 0);
}

function canonicalFile(file: ManifestFile): Record<string, unknown> {
  // Key order here is the canonical order; optional keys are omitted when absent.
  const out: Record<string, unknown> = { path: file.path, size: file.size };
  if (file.sha256 !== undefined) out['sha256'] = file.sha256;
  out['merkleRoot'] = file.merkleRoot;
  out['pieces'] = file.pieces;
  if (file.tensors !== undefined) {
    out['tensors'] = [...file.tensors]
      .sort((a, b) => a.start - b.start || compareStrings(a.name, b.name))
      .map((t) => ({ name: t.name, dtype: t.dtype, shape: t.shape, start: t.start, end: t.end }));
  }
  return out;
}

function compareStrings(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

/** The canonical bytes of a manifest: what is hashed and what is written to disk. */
export function encodeManifest(manifest: Manifest): Buffer {
  const files = [...manifest.files].sort((a, b) => compareStrings(a.path, b.path)).map(canonicalFile);
  const document = {
    format: MANIFEST_FORMAT,
    version: MANIFEST_VERSION,
    pieceSize: manifest.pieceSize,
    files,
  };
  return Buffer.from(JSON.stringify(document), 'utf8');
}

export function manifestDigest(manifest: Manifest): string {
  return 'sha256:' + createHash('sha256').update(encodeManifest(manifest)).digest('hex');
}

const hexDigest = s.string({ pattern: [/^[0-9a-f]{64}$/, 'expected 64 lowercase hex digits'] });
const byteCount = s.count();

const tensorSchema = s.object({
  name: s.string({ min: 1, max: 4096 }),
  dtype: s.oneOf(DTYPES),
  shape: s.array(byteCount, { max: 64 }),
  start: byteCount,
  end: byteCount,
});

const fileSchema = s.object({
  path: s.string(),
  size: byteCount,
  sha256: s.optional(hexDigest),
  merkleRoot: hexDigest,
  pieces: s.array(hexDigest),
  tensors: s.optional(s.array(tensorSchema)),
});

const manifestSchema = s.object({
  format: s.literal(MANIFEST_FORMAT),
  version: s.literal(MANIFEST_VERSION),
  pieceSize: s.number({ int: true, min: PIECE_SIZE_MIN, max: PIECE_SIZE_MAX }),
  files: s.array(fileSchema, { max: FILES_MAX }),
});

function invalid(source: string, message: string, details: Record<string, unknown> = {}): WeightcastError {
  return new WeightcastError('MANIFEST_INVALID', `${source}: ${message}`, { file: source, ...details });
}

/**
 * Throws MANIFEST_DIGEST_MISMATCH unless `file`'s Merkle root is the one of its piece digests: what
 * parseManifest checks for each file, unless told to skip it (a reader that checks them later).
 */
function checkMerkleRoot(source: string, file: ManifestFile): void {
  if (merkleRoot(file.pieces) !== file.merkleRoot) throw rootMismatch(source, file);
}

/** checkMerkleRoot in steps of `hashesPerStep` hashes (merkleRootSteps), for a caller's event loop. */
export function* checkMerkleRootSteps(
  source: string,
  file: ManifestFile,
  hashesPerStep: number,
): Generator<void, void, void> {
  if ((yield* merkleRootSteps(file.pieces, hashesPerStep)) !== file.merkleRoot)
    throw rootMismatch(source, file);
}

function rootMismatch(source: string, file: ManifestFile): WeightcastError {
  return new WeightcastError(
    'MANIFEST_DIGEST_MISMATCH',
    `${source}: ${file.path}: Merkle root does not match its piece digests`,
    { file: file.path },
  );
}

/** Checks one file entry of a schema-valid manifest: path, piece count, root, tensor ranges. */
function checkFile(source: string, file: ManifestFile, pieceSize: number, checkRoot: boolean): void {
  const problem = safeRelativePathProblem(file.path);
  if (problem !== undefined) {
    throw new WeightcastError(
      'MANIFEST_UNSAFE_PATH',
      `${source}: file path ${JSON.stringify(file.path)} ${problem}`,
      {
        file: file.path,
      },
    );
  }
  const expectedPieces = pieceCount(file.size, pieceSize);
  if (file.pieces.length !== expectedPieces) {
    throw new WeightcastError(
      'MANIFEST_SIZE_MISMATCH',
      `${source}: ${file.path} has ${file.size} bytes, which is ${expectedPieces} pieces, but lists ${file.pieces.length}`,
      { file: file.path },
    );
  }
  if (checkRoot) checkMerkleRoot(source, file);
  let previousEnd = 0;
  const tensors = [...(file.tensors ?? [])].sort((a, b) => a.start - b.start);
  for (const tensor of tensors) {
    if (tensor.start > tensor.end || tensor.end > file.size || tensor.start < previousEnd) {
      throw new WeightcastError(
        'MANIFEST_SIZE_MISMATCH',
        `${source}: ${file.path}: tensor ${tensor.name} range [${tensor.start}, ${tensor.end}) overlaps another or lies outside the file's ${file.size} bytes`,
        { file: file.path, tensor: tensor.name },
      );
    }
    previousEnd = tensor.end;
  }
}

/** Rejects two files that are the same path, or where one path is a directory of another. */
function checkPathsDistinct(source: string, files: readonly ManifestFile[]): void {
  const paths = new Set(files.map((f) => f.path));
  if (paths.size !== files.length) throw invalid(source, 'a file path is listed twice');
  for (const path of paths) {
    const segments = path.split('/');
    for (let i = 1; i < segments.length; i++) {
      const prefix = segments.slice(0, i).join('/');
      if (paths.has(prefix)) throw invalid(source, `${prefix} is both a file and a directory`, { path });
    }
  }
}

export interface ParseManifestOptions {
  /**
   * `skip`: the files' Merkle roots are not recomputed (every other check is made). Only for a reader
   * that neither uses the roots nor passes the manifest on, where each party that does parses it with
   * the check (the scheduler), or one that checks them itself before it uses them
   * (checkMerkleRootSteps: an agent's join, which fetches meanwhile and finishes no file before they
   * match). At 65,536 pieces the roots are ~100 ms of one-shot hashes.
   */
  merkleRoots?: 'check' | 'skip';
}

export function parseManifest(
  bytes: Buffer | string,
  source: string,
  options: ParseManifestOptions = {},
): Manifest {
  const body = parseJsonDocument(bytes, source, schemaCheck(manifestSchema), {
    name: 'manifest',
    bytesMax: MANIFEST_BYTES_MAX,
    tooLargeCode: 'MANIFEST_TOO_LARGE',
    invalidCode: 'MANIFEST_INVALID',
  });
  const files: ManifestFile[] = body.files.map((file) => {
    const out: ManifestFile = {
      path: file.path,
      size: file.size,
      merkleRoot: file.merkleRoot,
      pieces: file.pieces,
    };
    if (file.sha256 !== undefined) out.sha256 = file.sha256;
    if (file.tensors !== undefined) out.tensors = file.tensors;
    return out;
  });
  const total = files.reduce((sum, f) => sum + f.size, 0);
  if (total > MODEL_BYTES_MAX) {
    throw new WeightcastError(
      'MANIFEST_TOO_LARGE',
      `${source}: describes ${total} bytes, over the ${MODEL_BYTES_MAX} limit`,
      {
        file: source,
      },
    );
  }
  checkPathsDistinct(source, files);
  for (const file of files) checkFile(source, file, body.pieceSize, options.merkleRoots !== 'skip');
  return { pieceSize: body.pieceSize, files };
}

export interface LoadManifestOptions {
  signal?: AbortSignal;
  /** When given, the manifest's digest must equal it (`sha256:<hex>` or bare hex). */
  expectDigest?: string;
}

export async function loadManifest(path: string, options: LoadManifestOptions = {}): Promise<Manifest> {
  let bytes: Buffer;
  try {
    bytes = await readFile(path, options.signal ? { signal: options.signal } : {});
  } catch (error) {
    throw asInputFileError(error, 'the manifest', path);
  }
  const manifest = parseManifest(bytes, path);
  if (options.expectDigest !== undefined) {
    const expected = options.expectDigest.startsWith('sha256:')
      ? options.expectDigest
      : `sha256:${options.expectDigest}`;
    const actual = manifestDigest(manifest);
    if (actual !== expected) {
      throw new WeightcastError(
        'MANIFEST_DIGEST_MISMATCH',
        `${path}: digest is ${actual}, expected ${expected}`,
        {
          file: path,
        },
      );
    }
  }
  return manifest;
}

export async function writeManifest(path: string, manifest: Manifest): Promise<string> {
  await writeFile(path, encodeManifest(manifest));
  return manifestDigest(manifest);
}
