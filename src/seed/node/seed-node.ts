/**
 * A seed node: an agent started with `--role seed` holds pieces for the tier without consuming
 * models. Its routes are mounted by the agent's HTTP server under `/v1/seed`:
 *
 *   GET    /v1/seed/models                          -> { models: [hex] }
 *   PUT    /v1/seed/models/<hex>          manifest  -> { model } (store the manifest; idempotent)
 *   GET    /v1/seed/models/<hex>/manifest           -> canonical manifest bytes
 *   GET    /v1/seed/models/<hex>/pieces             -> { held: [n] }
 *   PUT    /v1/seed/models/<hex>/pieces/<n>  bytes  -> { result: stored|duplicate } (verified first)
 *   GET    /v1/seed/models/<hex>/pieces/<n>         -> the piece's bytes
 *   DELETE /v1/seed/models/<hex>/pieces/<n>         -> 204
 *   POST   /v1/seed/models/<hex>/pieces/<n>/verify  -> { ok, digest } (hash again from disk)
 *   POST   /v1/seed/models/<hex>/pieces/<n>/copy  {from, bytesPerSecond?} -> { result }
 *   GET    /v1/seed/models/<hex>/files/<path>  (Range) -> bytes of held pieces, for full-mesh reads
 *
 * A node takes only models the catalog has (created, or announced by a `put` under way): the
 * manifest it stores is the catalog's, so nobody fills its disk with models of their own. A copy is
 * pulled only from a node the catalog names (never from any URL a request names), verified against
 * the manifest before it is stored. A read takes an upload slot before any buffer and streams the
 * bytes through one buffer of at most UPLOAD_CHUNK_BYTES, so memory is slots x chunk, whatever the
 * ranges asked for.
 */

import type { IncomingMessage, ServerResponse } from 'node:http';
import { request } from 'undici';
import type { Role } from '../../auth/gate.js';
import type { ServiceAccess } from '../../auth/transport.js';
import { WeightcastError, isWeightcastError } from '../../errors.js';
import { parseManifest, manifestDigest, MANIFEST_BYTES_MAX } from '../../manifest/manifest.js';
import { Throttle } from '../../util/throttle.js';
import { writeDone } from '../../util/write-done.js';
import { CatalogClient } from '../catalog/client.js';
import {
  copyRequestSchema,
  modelHexSchema,
  parseBody,
  pathParts,
  readBody,
  readJson,
  sendSeedError,
  sendJson,
  seedRequestAccess,
} from '../wire.js';
import { SeedPieceStore } from './piece-files.js';

export interface SeedNodeOptions {
  /** Where pieces are kept (a folder of its own, e.g. `<cache>/seed`). */
  dir: string;
  /** The scheduler serving the catalog: which models this node takes, which nodes it copies from. */
  catalogUrl: string;
  /** Cap on what this node serves (reads and copies out); undefined = none. */
  uploadBytesPerSecond?: number;
  /** Reads served at once; more get 503 SWARM_BUSY with Retry-After. Default 16. */
  uploadsMax?: number;
  /** Fault injection for tests: store every piece with one byte flipped. */
  corruptStores?: boolean;
  /** The cluster credential (and TLS) this node sends: to the catalog, and to the nodes it copies from. */
  access?: ServiceAccess;
}

const COPY_TIMEOUT_MS = 300_000;
const REGISTER_ATTEMPTS = 30;
const REGISTER_RETRY_MS = 1000;
const RANGE_BYTES_MAX = 1024 * 1024 * 1024;
/** The one buffer a read streams through. */
export const UPLOAD_CHUNK_BYTES = 1024 * 1024;
const THROTTLED_WRITE_BYTES = 256 * 1024;
/** How long the catalog's node list is trusted before a copy asks again. */
const NODE_LIST_TTL_MS = 5000;

export class SeedNode {
  private uploads = 0;
  private readonly uploadThrottle: Throttle;
  private readonly catalog: CatalogClient;
  private nodeUrls: { urls: Set<string>; atMs: number } | undefined;
  /** Bytes of read buffers in use now and at most so far (for tests and status). */
  readonly uploadBuffers = { bytes: 0, peakBytes: 0 };

  private constructor(
    readonly store: SeedPieceStore,
    private readonly options: SeedNodeOptions,
  ) {
    this.uploadThrottle = new Throttle(options.uploadBytesPerSecond);
    this.catalog = new CatalogClient(options.catalogUrl, options.access);
  }

  static async open(options: SeedNodeOptions): Promise<SeedNode> {
    const store = await SeedPieceStore.open(options.dir, {
      ...(options.corruptStores === true ? { corruptStores: true } : {}),
    });
    return new SeedNode(store, options);
  }

  /** Registers this node with the catalog, retrying while the scheduler starts (bounded). */
  async register(schedulerUrl: string, name: string, url: string, signal?: AbortSignal): Promise<void> {
    const catalog = new CatalogClient(schedulerUrl, this.options.access);
    for (let attempt = 1; ; attempt++) {
      try {
        await catalog.registerNode(name, url, { signal });
        return;
      } catch (error) {
        const retryable = isWeightcastError(error, 'SEED_NODE_UNREACHABLE');
        if (!retryable || attempt >= REGISTER_ATTEMPTS || signal?.aborted === true) throw error;
        await new Promise((resolve) => setTimeout(resolve, REGISTER_RETRY_MS));
      }
    }
  }

  /**
   * Answers a request under `/v1/seed` (errors included) from a caller whose credential the agent
   * checked: reads are a member's; storing, deleting, verifying and copying pieces an operator's.
   */
  readonly handle = async (req: IncomingMessage, res: ServerResponse, role: Role): Promise<void> => {
    try {
      const method = req.method ?? 'GET';
      if (method !== 'GET' && method !== 'HEAD' && role !== 'operator') {
        throw new WeightcastError(
          'FORBIDDEN',
          `${method} on a seed node is an operator's change (WEIGHTCAST_OPERATOR_TOKEN or --operator-token-file)`,
        );
      }
      await this.route(req, res);
    } catch (error) {
      sendSeedError(res, error);
    }
  };

  private async route(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const { parts } = pathParts(req);
    // parts[0..1] are 'v1', 'seed'.
    const method = req.method ?? 'GET';
    if (parts[2] !== 'models') throw new WeightcastError('USAGE', `no seed route ${method} ${req.url ?? ''}`);
    if (parts.length === 3 && method === 'GET') {
      return sendJson(res, 200, { models: this.store.modelList() });
    }
    const hex = parseBody(modelHexSchema, parts[3], 'model name');
    if (parts.length === 4 && method === 'PUT') {
      const bytes = await readBody(req, MANIFEST_BYTES_MAX);
      const manifest = parseManifest(bytes, 'the manifest sent to this seed node');
      if (manifestDigest(manifest) !== `sha256:${hex}`) {
        throw new WeightcastError('MANIFEST_DIGEST_MISMATCH', `the manifest sent is not model ${hex}`);
      }
      await this.addCataloguedModel(hex);
      return sendJson(res, 200, { model: hex });
    }
    if (parts.length === 5 && parts[4] === 'manifest' && method === 'GET') {
      const bytes = this.store.manifestBytes(hex);
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': bytes.length });
      res.end(bytes);
      return;
    }
    if (parts[4] === 'pieces') {
      if (parts.length === 5 && method === 'GET') return sendJson(res, 200, { held: this.store.held(hex) });
      const piece = pieceNumber(parts[5]);
      if (parts.length === 6) return this.pieceRoute(hex, piece, method, req, res);
      if (parts.length === 7 && parts[6] === 'verify' && method === 'POST') {
        return sendJson(res, 200, await this.store.verify(hex, piece));
      }
      if (parts.length === 7 && parts[6] === 'copy' && method === 'POST') {
        const body = parseBody(copyRequestSchema, await readJson(req), 'copy request');
        const result = await this.copyFrom(hex, piece, body.from, body.bytesPerSecond);
        return sendJson(res, 200, { result });
      }
    }
    if (parts[4] === 'files' && parts.length > 5 && (method === 'GET' || method === 'HEAD')) {
      return this.serveFile(hex, parts.slice(5).join('/'), req, res);
    }
    throw new WeightcastError('USAGE', `no seed route ${method} ${req.url ?? ''}`);
  }

  private async pieceRoute(
    hex: string,
    piece: number,
    method: string,
    req: IncomingMessage,
    res: ServerResponse,
  ): Promise<void> {
    if (method === 'PUT') {
      const map = this.store.map(hex);
      if (piece >= map.pieceCount) throw new WeightcastError('SWARM_PROTOCOL', `no piece ${piece}`);
      const bytes = await readBody(req, map.pieceLength(piece));
      return sendJson(res, 200, { result: await this.store.put(hex, piece, bytes) });
    }
    if (method === 'DELETE') {
      await this.store.remove(hex, piece);
      res.writeHead(204).end();
      return;
    }
    if (method === 'GET') {
      const map = this.store.map(hex);
      if (piece >= map.pieceCount) throw new WeightcastError('SWARM_PROTOCOL', `no piece ${piece}`);
      return this.upload(res, map.pieceLength(piece), (offset, into) =>
        this.store.read(hex, piece, offset, into),
      );
    }
    throw new WeightcastError('USAGE', `no seed route ${method} for a piece`);
  }

  /** Byte ranges of a model file, answered only from pieces held here. */
  private async serveFile(
    hex: string,
    path: string,
    req: IncomingMessage,
    res: ServerResponse,
  ): Promise<void> {
    const map = this.store.map(hex);
    const fileIndex = map.manifest.files.findIndex((file) => file.path === path);
    const file = map.manifest.files[fileIndex];
    if (file === undefined) throw new WeightcastError('ORIGIN_NOT_FOUND', `model ${hex} has no file ${path}`);
    const range = parseRange(req.headers.range, file.size);
    if (range === undefined) {
      res.writeHead(416, { 'content-range': `bytes */${file.size}` }).end();
      return;
    }
    if (range.end - range.start > RANGE_BYTES_MAX) {
      throw new WeightcastError('LIMIT_EXCEEDED', `ranges are at most ${RANGE_BYTES_MAX} bytes`);
    }
    const pieces = map.piecesOfRange(fileIndex, range.start, range.end);
    const missing = pieces.find((piece) => !this.store.has(hex, piece));
    if (missing !== undefined) {
      throw new WeightcastError('SEED_PIECE_NOT_HELD', `piece ${missing} of ${path} is not held here`, {
        piece: missing,
      });
    }
    const headers = {
      'accept-ranges': 'bytes',
      'content-range': `bytes ${range.start}-${range.end - 1}/${file.size}`,
    };
    if (req.method === 'HEAD') {
      res.writeHead(206, { ...headers, 'content-length': range.end - range.start }).end();
      return;
    }
    // Bytes at `offset` of the range: piece by piece (a file's pieces are whole piece sizes apart).
    const firstPiece = pieces[0] ?? 0;
    const readRange = async (offset: number, into: Buffer): Promise<void> => {
      let filled = 0;
      while (filled < into.length) {
        const position = range.start + offset + filled;
        const piece =
          firstPiece + Math.floor(position / map.pieceSize) - Math.floor(range.start / map.pieceSize);
        const pieceStart = map.locate(piece).offset;
        const length = Math.min(into.length - filled, pieceStart + map.pieceSize - position);
        await this.store.read(hex, piece, position - pieceStart, into.subarray(filled, filled + length));
        filled += length;
      }
    };
    return this.upload(res, range.end - range.start, readRange, headers, 206);
  }

  /**
   * Sends `length` bytes that `readAt` gives, under the upload slots and cap: the slot first, then
   * one buffer of at most UPLOAD_CHUNK_BYTES, refilled only once the socket took its last bytes.
   */
  private async upload(
    res: ServerResponse,
    length: number,
    readAt: (offset: number, into: Buffer) => Promise<void>,
    headers: Record<string, string> = {},
    status = 200,
  ): Promise<void> {
    const slots = this.options.uploadsMax ?? 16;
    if (this.uploads >= slots) throw new WeightcastError('SWARM_BUSY', `all ${slots} upload slots are busy`);
    this.uploads++;
    const chunk = Buffer.allocUnsafe(Math.min(length, UPLOAD_CHUNK_BYTES));
    this.uploadBuffers.bytes += chunk.length;
    this.uploadBuffers.peakBytes = Math.max(this.uploadBuffers.peakBytes, this.uploadBuffers.bytes);
    try {
      // The first bytes are read before the head, so a failed read is still an error answer.
      await readAt(0, chunk.subarray(0, Math.min(length, chunk.length)));
      res.writeHead(status, {
        ...headers,
        'content-type': 'application/octet-stream',
        'content-length': length,
      });
      for (let offset = 0; offset < length; offset += chunk.length) {
        if (res.destroyed) return;
        const part = chunk.subarray(0, Math.min(chunk.length, length - offset));
        if (offset > 0) await readAt(offset, part);
        // Under a cap, smaller writes keep the rate smooth.
        const step = this.uploadThrottle.limited ? THROTTLED_WRITE_BYTES : part.length;
        for (let at = 0; at < part.length; at += step) {
          const slice = part.subarray(at, Math.min(part.length, at + step));
          await this.uploadThrottle.take(slice.length);
          if (!(await writeDone(res, slice))) return;
        }
      }
      await new Promise<void>((resolve) => res.end(resolve));
    } finally {
      this.uploads--;
      this.uploadBuffers.bytes -= chunk.length;
    }
  }

  /** Stores the catalog's manifest of a model the catalog has; any other model is refused. */
  private async addCataloguedModel(hex: string): Promise<void> {
    if (this.store.hasModel(hex)) return;
    let manifest;
    try {
      manifest = await this.catalog.manifest(hex);
    } catch (error) {
      if (!isWeightcastError(error, 'SEED_UNKNOWN_MODEL')) throw error;
      throw new WeightcastError(
        'FORBIDDEN',
        `the catalog has no model ${hex}: a seed node takes only models the catalog has (put announces them)`,
        { model: hex },
      );
    }
    await this.store.addModel(manifest);
  }

  /** A copy's source must be a node the catalog names (its list is asked again when it may be stale). */
  private async checkCopySource(source: string): Promise<void> {
    const fresh = (): boolean =>
      this.nodeUrls !== undefined && performance.now() - this.nodeUrls.atMs < NODE_LIST_TTL_MS;
    for (let asked = false; ; asked = true) {
      if (fresh() && this.nodeUrls!.urls.has(source)) return;
      if (asked) break;
      const nodes = await this.catalog.nodes();
      this.nodeUrls = {
        urls: new Set(nodes.map((node) => node.url.replace(/\/+$/, ''))),
        atMs: performance.now(),
      };
    }
    throw new WeightcastError(
      'FORBIDDEN',
      `copies come only from seed nodes the catalog names; ${source} is not one`,
      { url: source },
    );
  }

  /** Pulls a piece from another seed node, verifies it against the manifest and stores it. */
  private async copyFrom(
    hex: string,
    piece: number,
    from: string,
    bytesPerSecond: number | undefined,
  ): Promise<'stored' | 'duplicate'> {
    const source = from.replace(/\/+$/, '');
    await this.checkCopySource(source);
    await this.addCataloguedModel(hex);
    if (this.store.has(hex, piece)) return 'duplicate';
    const map = this.store.map(hex);
    if (piece >= map.pieceCount) throw new WeightcastError('SWARM_PROTOCOL', `no piece ${piece}`);
    const bytes = await fetchPiece(
      `${source}/v1/seed/models/${hex}/pieces/${piece}`,
      map.pieceLength(piece),
      bytesPerSecond,
      this.options.access,
    );
    return this.store.put(hex, piece, bytes);
  }
}

/** GETs a piece from a seed node into one buffer, at most `bytesPerSecond` when given. */
async function fetchPiece(
  url: string,
  length: number,
  bytesPerSecond: number | undefined,
  access: ServiceAccess | undefined,
): Promise<Buffer> {
  const throttle = new Throttle(bytesPerSecond);
  let response;
  try {
    response = await request(url, {
      method: 'GET',
      signal: AbortSignal.timeout(COPY_TIMEOUT_MS),
      ...seedRequestAccess(access),
    });
  } catch (error) {
    throw new WeightcastError(
      'SEED_NODE_UNREACHABLE',
      `the source seed node at ${url} did not answer: ${(error as Error).message}`,
      { url },
      { cause: error },
    );
  }
  if (response.statusCode !== 200) {
    const text = await response.body.text().catch(() => '');
    const code = /"code":"(SEED_PIECE_NOT_HELD|SEED_UNKNOWN_MODEL|SWARM_BUSY|UNAUTHORIZED)"/.exec(text)?.[1];
    throw new WeightcastError(
      code === 'SWARM_BUSY' || code === 'UNAUTHORIZED'
        ? code
        : code === undefined
          ? 'SWARM_PROTOCOL'
          : 'SEED_PIECE_NOT_HELD',
      `the source seed node answered ${response.statusCode} for ${url}`,
      { url },
    );
  }
  const buffer = Buffer.allocUnsafe(length);
  let filled = 0;
  try {
    for await (const chunk of response.body as AsyncIterable<Buffer>) {
      if (filled + chunk.length > length)
        throw new WeightcastError('SEED_VERIFY_FAILED', `${url} sent too many bytes`);
      chunk.copy(buffer, filled);
      filled += chunk.length;
      await throttle.take(chunk.length);
    }
  } catch (error) {
    if (isWeightcastError(error)) throw error;
    throw new WeightcastError(
      'SEED_NODE_UNREACHABLE',
      `copy from ${url} broke off`,
      { url },
      { cause: error },
    );
  }
  if (filled !== length)
    throw new WeightcastError('SEED_VERIFY_FAILED', `${url} sent ${filled} of ${length} bytes`);
  return buffer;
}

function pieceNumber(text: string | undefined): number {
  const piece = Number(text);
  if (text === undefined || !/^\d+$/.test(text) || !Number.isSafeInteger(piece)) {
    throw new WeightcastError('SWARM_PROTOCOL', `bad piece number ${String(text)}`);
  }
  return piece;
}

/** `bytes=a-b`, `bytes=a-`, `bytes=-n` or none (the whole file); undefined when unsatisfiable. */
function parseRange(header: string | undefined, size: number): { start: number; end: number } | undefined {
  if (header === undefined) return size === 0 ? undefined : { start: 0, end: size };
  const match = /^bytes=(\d*)-(\d*)$/.exec(header.trim());
  if (match === null) return undefined;
  const [, first = '', last = ''] = match;
  if (first === '' && last === '') return undefined;
  if (first === '') {
    const suffix = Number(last);
    return suffix === 0 ? undefined : { start: Math.max(0, size - suffix), end: size };
  }
  const start = Number(first);
  const end = last === '' ? size : Math.min(size, Number(last) + 1);
  return start >= size || end <= start ? undefined : { start, end };
}
