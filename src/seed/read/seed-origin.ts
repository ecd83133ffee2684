/**
 * An Origin over the seed tier: reads a model's bytes from the seed nodes the catalog's map names,
 * each piece from its primary (then its replicas), so a pull with several reads in flight reads from
 * every node at once (full-mesh reads). `pull MODEL --seeds SCHEDULER_URL` uses it; the pull verifies
 * every piece against the manifest as it does for any origin.
 *
 * The map can change under a reader (`distribute --apply`): old copies stay for a grace period after
 * each commit, and a reader whose copy is gone anyway (a node answers "not held", or is down) asks
 * the catalog for the map again (a bounded number of times) and reads from the new holder.
 */

import type { ServiceAccess } from '../../auth/transport.js';
import { WeightcastError, isWeightcastError, throwIfAborted } from '../../errors.js';
import type { Manifest } from '../../manifest/manifest.js';
import { HttpOrigin } from '../../origin/http.js';
import type { Origin, OriginCallOptions, OriginEntry } from '../../origin/origin.js';
import { PieceMap } from '../../piece/piece-map.js';
import { CatalogClient } from '../catalog/client.js';
import type { ModelSnapshot } from '../wire.js';

export interface SeedOriginOptions {
  schedulerUrl: string;
  manifest: Manifest;
  /** Connections per seed node. Default 4. */
  connectionsPerNode?: number;
  /** Times the map is fetched again after reads fail. Default 8. */
  mapRefreshesMax?: number;
  signal?: AbortSignal;
  /** The credential (and TLS) for the catalog and the seed nodes. */
  access?: ServiceAccess;
}

export interface SeedReadStats {
  /** Bytes read per node name. */
  bytesByNode: Map<string, number>;
  mapRefreshes: number;
  failedReads: number;
}

export class SeedOrigin implements Origin {
  readonly location: string;
  readonly stats: SeedReadStats = { bytesByNode: new Map(), mapRefreshes: 0, failedReads: 0 };
  private readonly map: PieceMap;
  private readonly catalog: CatalogClient;
  private readonly nodeOrigins = new Map<string, HttpOrigin>();
  private readonly files: OriginEntry[];
  private snapshot: ModelSnapshot;
  private refreshing: Promise<void> | undefined;

  private constructor(
    private readonly hex: string,
    private readonly options: SeedOriginOptions,
    snapshot: ModelSnapshot,
  ) {
    this.map = new PieceMap(options.manifest);
    this.catalog = new CatalogClient(options.schedulerUrl, options.access);
    this.snapshot = snapshot;
    this.location = `${this.catalog.base}/models/${hex}`;
    this.files = options.manifest.files.map((file) => ({ path: file.path, size: file.size }));
  }

  /** Distinct nodes holding primaries in the map: how many links a pull can read at once. */
  get primaryNodes(): number {
    return new Set(this.snapshot.pieces.map((piece) => piece.holders[0])).size;
  }

  /** Reads the model's map from the catalog and checks it fits the manifest. */
  static async open(hex: string, options: SeedOriginOptions): Promise<SeedOrigin> {
    const catalog = new CatalogClient(options.schedulerUrl, options.access);
    const snapshot = await catalog.requireSnapshot(hex, { signal: options.signal });
    const origin = new SeedOrigin(hex, options, snapshot);
    if (snapshot.pieces.length !== origin.map.pieceCount) {
      throw new WeightcastError(
        'SEED_PLAN_INVALID',
        `the catalog maps ${snapshot.pieces.length} pieces but the manifest has ${origin.map.pieceCount}`,
      );
    }
    return origin;
  }

  list(options: OriginCallOptions = {}): Promise<OriginEntry[]> {
    throwIfAborted(options.signal, 'listing the seed tier');
    return Promise.resolve(this.files.map((entry) => ({ ...entry })));
  }

  stat(path: string): Promise<OriginEntry> {
    const entry = this.files.find((file) => file.path === path);
    if (entry === undefined) {
      return Promise.reject(new WeightcastError('ORIGIN_NOT_FOUND', `model ${this.hex} has no file ${path}`));
    }
    return Promise.resolve({ ...entry });
  }

  async readInto(
    path: string,
    offset: number,
    target: Uint8Array,
    options: OriginCallOptions = {},
  ): Promise<void> {
    const fileIndex = this.map.manifest.files.findIndex((file) => file.path === path);
    if (fileIndex < 0) throw new WeightcastError('ORIGIN_NOT_FOUND', `model ${this.hex} has no file ${path}`);
    const end = offset + target.length;
    const pieceSize = this.map.pieceSize;
    // Piece by piece: each piece may sit on a different node.
    const reads: Promise<void>[] = [];
    for (const piece of this.map.piecesOfRange(fileIndex, offset, end)) {
      const pieceStart = this.map.locate(piece).offset;
      const from = Math.max(offset, pieceStart);
      const to = Math.min(end, pieceStart + pieceSize);
      reads.push(this.readPiecePart(piece, path, from, target.subarray(from - offset, to - offset), options));
    }
    await Promise.all(reads);
  }

  async close(): Promise<void> {
    await Promise.all([...this.nodeOrigins.values()].map((origin) => origin.close()));
    this.nodeOrigins.clear();
  }

  private async readPiecePart(
    piece: number,
    path: string,
    offset: number,
    target: Uint8Array,
    options: OriginCallOptions,
  ): Promise<void> {
    const refreshesMax = this.options.mapRefreshesMax ?? 8;
    let lastError: unknown;
    for (let round = 0; round <= refreshesMax; round++) {
      const tried = new Set<string>();
      for (const name of this.holdersOf(piece)) {
        tried.add(name);
        const origin = this.nodeOrigin(name);
        if (origin === undefined) continue;
        try {
          await origin.readInto(path, offset, target, options);
          this.stats.bytesByNode.set(name, (this.stats.bytesByNode.get(name) ?? 0) + target.length);
          return;
        } catch (error) {
          if (options.signal?.aborted === true || isWeightcastError(error, 'ABORTED')) throw error;
          this.stats.failedReads++;
          lastError = error;
        }
      }
      if (round < refreshesMax) await this.refresh(options.signal);
    }
    throw new WeightcastError(
      'ORIGIN_RETRIES_EXHAUSTED',
      `piece ${piece} of ${path}: no seed node in the catalog's map could serve it`,
      { file: path, piece },
      { cause: lastError },
    );
  }

  private holdersOf(piece: number): string[] {
    return this.snapshot.pieces[piece]?.holders ?? [];
  }

  private nodeOrigin(name: string): HttpOrigin | undefined {
    const existing = this.nodeOrigins.get(name);
    if (existing !== undefined) return existing;
    const node = this.snapshot.nodes.find((entry) => entry.name === name);
    if (node === undefined) return undefined;
    const origin = new HttpOrigin(`${node.url.replace(/\/+$/, '')}/v1/seed/models/${this.hex}/files/`, {
      files: this.files,
      connections: this.options.connectionsPerNode ?? 4,
      retries: 2,
      backoffBaseMs: 50,
      backoffMaxMs: 1000,
      ...(this.options.access?.token === undefined ? {} : { token: this.options.access.token }),
      tls: this.options.access?.tls,
    });
    this.nodeOrigins.set(name, origin);
    return origin;
  }

  /** Fetches the map again; concurrent failed reads share one fetch. */
  private async refresh(signal: AbortSignal | undefined): Promise<void> {
    this.refreshing ??= (async () => {
      try {
        await new Promise((resolve) => setTimeout(resolve, 100));
        this.snapshot = await this.catalog.requireSnapshot(this.hex, { signal });
        this.stats.mapRefreshes++;
      } finally {
        this.refreshing = undefined;
      }
    })();
    await this.refreshing;
  }
}
