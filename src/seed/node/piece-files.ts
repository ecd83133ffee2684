/**
 * A seed node's piece store: for each model, its manifest and a sparse set of verified pieces, one
 * file per piece. Layout under the store's directory:
 *
 *   <hex>/manifest.json        canonical manifest (its SHA-256 is <hex>)
 *   <hex>/pieces/<n>           global piece n, exactly its bytes
 *   <hex>/incoming/            pieces being written
 *
 * A piece is hashed against the manifest before it is written; it is written to `incoming/`,
 * fsynced, renamed to `pieces/<n>` and the directory fsynced before the put is answered. So a file
 * under `pieces/` is always a complete piece that was verified, and an acknowledged piece survives a
 * crash of the node (the re-layout deletes the old copy only after the new one is acknowledged).
 *
 * Why not the agent's PieceStore: that one writes pieces at their offsets inside whole model files,
 * for hosts that end up with every piece; a seed node holds a sparse subset and must delete pieces
 * one by one, which one file per piece makes a single unlink, and makes a put one atomic rename.
 */

import { randomBytes } from 'node:crypto';
import { mkdir, open, readdir, readFile, rename, rm, stat, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import { WeightcastError } from '../../errors.js';
import { encodeManifest, manifestDigest, parseManifest, type Manifest } from '../../manifest/manifest.js';
import { PieceMap } from '../../piece/piece-map.js';
import { syncDirectory, writeDurably } from '../catalog/store.js';
import { pieceDigest, verifyPiece } from '../../piece/verify.js';

export type StoreResult = 'stored' | 'duplicate';

interface ModelPieces {
  hex: string;
  map: PieceMap;
  held: Set<number>;
  /** Puts in progress per piece, so two copies of one piece do not race. */
  writing: Map<number, Promise<StoreResult>>;
}

export interface SeedPieceStoreOptions {
  /** Fault injection for tests: write every piece with one byte flipped (after verifying it). */
  corruptStores?: boolean;
}

export class SeedPieceStore {
  private readonly models = new Map<string, ModelPieces>();
  private readonly adding = new Map<string, Promise<void>>();

  private constructor(
    readonly dir: string,
    private readonly options: SeedPieceStoreOptions,
  ) {}

  static async open(dir: string, options: SeedPieceStoreOptions = {}): Promise<SeedPieceStore> {
    await mkdir(dir, { recursive: true });
    const store = new SeedPieceStore(dir, options);
    for (const name of await readdir(dir)) {
      if (!/^[0-9a-f]{64}$/.test(name)) continue;
      const manifestPath = join(dir, name, 'manifest.json');
      const bytes = await readFile(manifestPath).catch(() => undefined);
      if (bytes === undefined) continue;
      const manifest = parseManifest(bytes, manifestPath);
      if (manifestDigest(manifest) !== `sha256:${name}`) continue;
      await store.adopt(name, manifest);
    }
    return store;
  }

  modelList(): string[] {
    return [...this.models.keys()].sort();
  }

  hasModel(hex: string): boolean {
    return this.models.has(hex);
  }

  map(hex: string): PieceMap {
    return this.model(hex).map;
  }

  /** Stores a model's manifest (idempotent); the model's pieces can be put after this. */
  async addModel(manifest: Manifest): Promise<string> {
    const hex = manifestDigest(manifest).slice('sha256:'.length);
    if (this.models.has(hex)) return hex;
    // Copies of several pieces of a new model arrive at once: one of them writes the manifest.
    let adding = this.adding.get(hex);
    if (adding === undefined) {
      adding = (async () => {
        await mkdir(join(this.dir, hex), { recursive: true });
        await writeDurably(join(this.dir, hex), 'manifest.json', encodeManifest(manifest));
        await this.adopt(hex, manifest);
      })().finally(() => this.adding.delete(hex));
      this.adding.set(hex, adding);
    }
    await adding;
    return hex;
  }

  manifestBytes(hex: string): Buffer {
    return encodeManifest(this.model(hex).map.manifest);
  }

  held(hex: string): number[] {
    return [...this.model(hex).held].sort((a, b) => a - b);
  }

  has(hex: string, piece: number): boolean {
    return this.models.get(hex)?.held.has(piece) === true;
  }

  /** Verifies `bytes` as piece `piece` and stores them durably. Wrong bytes: SEED_VERIFY_FAILED. */
  async put(hex: string, piece: number, bytes: Uint8Array): Promise<StoreResult> {
    const model = this.model(hex);
    const where = locate(model, piece);
    if (!verifyPiece(bytes, where)) {
      throw new WeightcastError(
        'SEED_VERIFY_FAILED',
        `piece ${piece} of model ${hex.slice(0, 12)}: the bytes do not match the manifest`,
        { piece },
      );
    }
    if (model.held.has(piece)) return 'duplicate';
    const running = model.writing.get(piece);
    if (running !== undefined) return running.then(() => 'duplicate' as const);
    const write = this.write(model, piece, bytes).finally(() => model.writing.delete(piece));
    model.writing.set(piece, write);
    return write;
  }

  /** Reads bytes [offset, offset + target.length) of a held piece. */
  async read(hex: string, piece: number, offset: number, target: Uint8Array): Promise<void> {
    const model = this.model(hex);
    if (!model.held.has(piece)) {
      throw new WeightcastError(
        'SEED_PIECE_NOT_HELD',
        `piece ${piece} of model ${hex.slice(0, 12)} is not held here`,
        {
          piece,
        },
      );
    }
    const handle = await open(this.piecePath(hex, piece), 'r').catch((error: unknown) => {
      // Deleted between the check and the open: the same answer as not held.
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') {
        throw new WeightcastError('SEED_PIECE_NOT_HELD', `piece ${piece} is not held here`, { piece });
      }
      throw error;
    });
    try {
      let done = 0;
      while (done < target.length) {
        const { bytesRead } = await handle.read(target, done, target.length - done, offset + done);
        if (bytesRead <= 0) throw new WeightcastError('IO', `piece file ${piece} is short`);
        done += bytesRead;
      }
    } finally {
      await handle.close();
    }
  }

  /** Hashes the stored piece again from disk; a piece that fails is removed. */
  async verify(hex: string, piece: number): Promise<{ ok: boolean; digest: string }> {
    const model = this.model(hex);
    const where = locate(model, piece);
    if (!model.held.has(piece)) return { ok: false, digest: '' };
    const bytes = await readFile(this.piecePath(hex, piece)).catch(() => Buffer.alloc(0));
    const digest = pieceDigest(bytes);
    const ok = bytes.length === where.length && digest === where.digest;
    if (!ok) await this.remove(hex, piece);
    return { ok, digest };
  }

  /** Removes a piece (idempotent). */
  async remove(hex: string, piece: number): Promise<void> {
    const model = this.model(hex);
    locate(model, piece);
    await model.writing.get(piece)?.catch(() => undefined);
    model.held.delete(piece);
    await unlink(this.piecePath(hex, piece)).catch((error: unknown) => {
      if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
    });
    await syncDirectory(join(this.dir, hex, 'pieces'));
  }

  private model(hex: string): ModelPieces {
    const model = this.models.get(hex);
    if (model === undefined) {
      throw new WeightcastError('SEED_UNKNOWN_MODEL', `this seed node has no model ${hex}`, { model: hex });
    }
    return model;
  }

  private piecePath(hex: string, piece: number): string {
    return join(this.dir, hex, 'pieces', String(piece));
  }

  private async write(model: ModelPieces, piece: number, bytes: Uint8Array): Promise<StoreResult> {
    const incoming = join(this.dir, model.hex, 'incoming', `${piece}.${randomBytes(4).toString('hex')}`);
    let data = bytes;
    if (this.options.corruptStores === true && bytes.length > 0) {
      data = Buffer.from(bytes);
      data[data.length >> 1] = (data[data.length >> 1] ?? 0) ^ 0xff;
    }
    const handle = await open(incoming, 'w');
    try {
      await handle.writeFile(data);
      await handle.datasync();
    } finally {
      await handle.close();
    }
    await rename(incoming, this.piecePath(model.hex, piece));
    await syncDirectory(join(this.dir, model.hex, 'pieces'));
    model.held.add(piece);
    return 'stored';
  }

  /** Takes in a model found on disk: pieces of the right size count; leftovers of puts go. */
  private async adopt(hex: string, manifest: Manifest): Promise<void> {
    const map = new PieceMap(manifest);
    const model: ModelPieces = { hex, map, held: new Set(), writing: new Map() };
    await rm(join(this.dir, hex, 'incoming'), { recursive: true, force: true });
    await mkdir(join(this.dir, hex, 'incoming'), { recursive: true });
    await mkdir(join(this.dir, hex, 'pieces'), { recursive: true });
    for (const name of await readdir(join(this.dir, hex, 'pieces'))) {
      const piece = Number(name);
      if (!/^\d+$/.test(name) || piece >= map.pieceCount) continue;
      const size = (await stat(this.piecePath(hex, piece))).size;
      if (size === map.pieceLength(piece)) model.held.add(piece);
    }
    this.models.set(hex, model);
  }
}

function locate(model: ModelPieces, piece: number): { length: number; digest: string } {
  if (!Number.isSafeInteger(piece) || piece < 0 || piece >= model.map.pieceCount) {
    throw new WeightcastError('SWARM_PROTOCOL', `piece ${piece} is outside 0..${model.map.pieceCount - 1}`);
  }
  const where = model.map.locate(piece);
  return { length: where.length, digest: where.digest };
}
