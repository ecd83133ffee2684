/**
 * `weightcast put`: loads a model from an origin into the seed tier, placing pieces by policy from
 * the start, and commits the placement map to the catalog.
 *
 * How data moves: the catalog's active nodes (by name) and the policy give every piece its holders
 * (`placePieces`, pure). Each node is sent the manifest and asked which pieces it already holds (a
 * put run again after a crash sends only what is missing). Lanes read pieces from the origin, hash
 * them against the manifest (the origin is not trusted either), and PUT them to their holders under
 * a per-node limit; the nodes verify again before storing. Only when every holder has acknowledged
 * every piece is the map committed to the catalog, so a map never names a copy that is not there.
 */

import type { ServiceAccess } from '../../auth/transport.js';
import { WeightcastError, throwIfAborted } from '../../errors.js';
import { manifestDigest, type Manifest } from '../../manifest/manifest.js';
import type { Origin } from '../../origin/origin.js';
import { PieceMap } from '../../piece/piece-map.js';
import { CatalogClient } from '../catalog/client.js';
import { pieceSizes } from '../catalog/store.js';
import { Semaphore, runPool } from '../limits.js';
import { SeedNodeClient } from '../node/client.js';
import { compareNames } from '../plan/layout.js';
import { placePieces, type PlacementPolicy } from '../plan/index.js';
import type { ModelSnapshot } from '../wire.js';
import { verifyPiece } from '../../piece/verify.js';

export interface PutOptions {
  schedulerUrl: string;
  /** The operator's credential (and TLS) for the catalog and the seed nodes. */
  access?: ServiceAccess;
  origin: Origin;
  manifest: Manifest;
  policy: PlacementPolicy;
  replicas: number;
  /** Seed of `balanced` tie-breaks. */
  seed?: number;
  /** Pieces read from the origin at once (memory: this many piece buffers). Default 4. */
  concurrency?: number;
  /** Uploads to one node at once. Default 2. */
  nodeUploads?: number;
  /** Times a piece whose origin bytes fail verification is read again. Default 3. */
  pieceRetries?: number;
  signal?: AbortSignal;
  onEvent?: (event: PutEvent) => void;
}

export type PutEvent =
  | {
      type: 'placement';
      model: string;
      nodes: string[];
      pieces: number;
      piecesToSend: number;
      bytesToSend: number;
    }
  | { type: 'progress'; bytesDone: number; bytesTotal: number }
  | { type: 'piece-rejected'; piece: number; attempt: number };

export interface PutResult {
  model: string;
  snapshot: ModelSnapshot;
  /** True when the catalog already had the model: nothing was sent. */
  alreadyPresent: boolean;
  piecesSent: number;
  bytesSent: number;
}

export async function putModel(options: PutOptions): Promise<PutResult> {
  const { manifest, signal } = options;
  const model = manifestDigest(manifest).slice('sha256:'.length);
  const catalog = new CatalogClient(options.schedulerUrl, options.access);
  const existing = await catalog.snapshot(model, { signal });
  if (existing !== undefined) {
    return { model, snapshot: existing, alreadyPresent: true, piecesSent: 0, bytesSent: 0 };
  }
  const nodes = (await catalog.nodes({ signal })).filter((node) => node.active);
  nodes.sort((a, b) => compareNames(a.name, b.name));
  if (nodes.length === 0) {
    throw new WeightcastError(
      'SEED_PLACEMENT_IMPOSSIBLE',
      'no active seed node is registered with the catalog',
    );
  }
  const sizes = pieceSizes(manifest);
  const holders = placePieces(
    sizes,
    nodes.map((node) => node.name),
    {
      policy: options.policy,
      replicas: options.replicas,
      ...(options.seed === undefined ? {} : { seed: options.seed }),
    },
  );
  // Seed nodes take pieces only for models whose manifest the catalog has.
  await catalog.announceModel(manifest, { signal });
  const clients = new Map(
    nodes.map((node) => [node.name, new SeedNodeClient(node.name, node.url, options.access)]),
  );
  const held = new Map<string, Set<number>>();
  for (const [name, client] of clients) {
    await client.putManifest(manifest, { signal });
    held.set(name, new Set(await client.held(model, { signal })));
  }
  const work: Array<{ piece: number; targets: string[] }> = [];
  let bytesToSend = 0;
  holders.forEach((list, piece) => {
    const targets = list.filter((name) => held.get(name)?.has(piece) !== true);
    if (targets.length === 0) return;
    work.push({ piece, targets });
    bytesToSend += sizes[piece]! * targets.length;
  });
  options.onEvent?.({
    type: 'placement',
    model,
    nodes: nodes.map((node) => node.name),
    pieces: sizes.length,
    piecesToSend: work.length,
    bytesToSend,
  });

  const map = new PieceMap(manifest);
  const limits = new Map(nodes.map((node) => [node.name, new Semaphore(options.nodeUploads ?? 2)]));
  let bytesSent = 0;
  await runPool(
    work,
    options.concurrency ?? 4,
    async ({ piece, targets }) => {
      const bytes = await readVerified(options, map, piece);
      await Promise.all(
        targets.map((name) =>
          limits.get(name)!.with(async () => {
            await clients.get(name)!.putPiece(model, piece, bytes, { signal });
            bytesSent += bytes.length;
            options.onEvent?.({ type: 'progress', bytesDone: bytesSent, bytesTotal: bytesToSend });
          }, signal),
        ),
      );
    },
    signal,
  );
  throwIfAborted(signal, 'put');
  const snapshot = await catalog.createModel(manifest, holders, { signal });
  return { model, snapshot, alreadyPresent: false, piecesSent: work.length, bytesSent };
}

/** Reads a piece from the origin and checks it against the manifest (a few attempts). */
async function readVerified(options: PutOptions, map: PieceMap, piece: number): Promise<Buffer> {
  const where = map.locate(piece);
  const buffer = Buffer.allocUnsafe(where.length);
  const attempts = (options.pieceRetries ?? 3) + 1;
  for (let attempt = 1; attempt <= attempts; attempt++) {
    await options.origin.readInto(
      where.file.path,
      where.offset,
      buffer,
      options.signal ? { signal: options.signal } : {},
    );
    if (verifyPiece(buffer, where)) return buffer;
    options.onEvent?.({ type: 'piece-rejected', piece, attempt });
  }
  throw new WeightcastError(
    'PIECE_HASH_MISMATCH',
    `piece ${where.piece} of ${where.file.path} kept failing verification at the origin`,
    { file: where.file.path, piece: where.piece },
  );
}
