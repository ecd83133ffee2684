/**
 * The seed tier's catalog: the registered seed nodes and, per model, the placement map (piece ->
 * holders, primary first) with a version per entry. Owned by the scheduler (`--catalog DIR`).
 *
 * Every change is a compare-and-swap on entry versions, applied one at a time: a mutation is checked
 * against the committed state, written to the journal and fsynced, and only then applied in memory
 * and answered. So a client that got "committed" can never see it undone, and a reader never sees a
 * change that a crash could take back.
 *
 * On disk (DIR):
 * - `journal`: one line per change, `<16 hex of SHA-256> <JSON record>`; appended and fsynced per
 *   change. A torn or corrupt tail (a crash mid-append) is cut off when the catalog opens: it was
 *   never acknowledged.
 * - `snapshot.json`: the whole state at a journal sequence number, written to a temporary file,
 *   fsynced and renamed over the old one (then the directory is fsynced). After a snapshot the
 *   journal is truncated; a crash between rename and truncation only leaves records the replay skips
 *   (their sequence is not above the snapshot's).
 * - `manifests/<hex>.json`: each model's manifest, content-addressed, written and renamed before the
 *   record that creates the model.
 * Why both: rewriting the whole map per commit would cost O(pieces) bytes and an fsync of a large
 * file for every move of a 100k-piece model; appending costs one short line. The snapshot bounds how
 * much journal a restart replays.
 */

import { createHash } from 'node:crypto';
import { mkdir, open, readFile, readdir, rename, rm, type FileHandle } from 'node:fs/promises';
import { join } from 'node:path';
import { WeightcastError, assert } from '../../errors.js';
import { encodeManifest, manifestDigest, parseManifest, type Manifest } from '../../manifest/manifest.js';
import { SEED_NODES_MAX, SEED_PIECES_MAX, type PieceHolding } from '../plan/index.js';
import type { CatalogNode, CommitResult, CommitUpdate, ModelSnapshot } from '../wire.js';

/** Journal records between snapshots. */
export const SNAPSHOT_EVERY_RECORDS = 1000;
/** Journal bytes that also trigger a snapshot (large model creations). */
export const SNAPSHOT_EVERY_BYTES = 32 * 1024 * 1024;
export const CATALOG_MODELS_MAX = 4096;

type Record =
  | { type: 'node'; name: string; url: string; active: boolean }
  | { type: 'model'; model: string; pieceSize: number; pieces: PieceHolding[] }
  | { type: 'commit'; model: string; entries: Array<{ piece: number; holders: string[]; version: number }> };

interface Entry {
  sizeBytes: number;
  holders: string[];
  version: number;
}

interface ModelState {
  pieceSize: number;
  entries: Entry[];
}

interface SnapshotFile {
  format: 'weightcast-catalog';
  seq: number;
  nodes: CatalogNode[];
  models: Array<{ model: string; pieceSize: number; pieces: PieceHolding[] }>;
}

export interface CatalogOpenOptions {
  /** Overrides for tests. */
  snapshotEveryRecords?: number;
}

export class CatalogStore {
  private readonly nodes = new Map<string, CatalogNode>();
  private readonly models = new Map<string, ModelState>();
  /**
   * Models whose manifest is filed but which have no placement yet (a `put` under way): seed nodes
   * accept pieces only for models the catalog has a manifest of. On disk, a manifest file without a
   * model record.
   */
  private readonly announced = new Set<string>();
  private seq = 0;
  private snapshotSeq = 0;
  private journalBytes = 0;
  private recordsSinceSnapshot = 0;
  private queue: Promise<unknown> = Promise.resolve();
  private closed = false;
  /** Set when a journal write failed: what follows on disk is unknown, so no more changes. */
  private broken: unknown;

  private constructor(
    private readonly dir: string,
    private journal: FileHandle,
    private readonly snapshotEvery: number,
  ) {}

  static async open(dir: string, options: CatalogOpenOptions = {}): Promise<CatalogStore> {
    await mkdir(join(dir, 'manifests'), { recursive: true });
    await rm(join(dir, 'snapshot.json.tmp'), { force: true });
    const journalPath = join(dir, 'journal');
    const handle = await open(journalPath, 'a+');
    const store = new CatalogStore(dir, handle, options.snapshotEveryRecords ?? SNAPSHOT_EVERY_RECORDS);
    try {
      await store.load();
    } catch (error) {
      await handle.close();
      throw error;
    }
    return store;
  }

  // ---- reads -------------------------------------------------------------------------------------

  listNodes(): CatalogNode[] {
    return [...this.nodes.values()].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  }

  listModels(): string[] {
    return [...this.models.keys()].sort();
  }

  hasModel(model: string): boolean {
    return this.models.has(model);
  }

  snapshot(model: string): ModelSnapshot {
    const state = this.modelState(model);
    return {
      model,
      pieceSize: state.pieceSize,
      nodes: this.listNodes(),
      pieces: state.entries.map((entry, index) => ({
        index,
        sizeBytes: entry.sizeBytes,
        holders: [...entry.holders],
        version: entry.version,
      })),
    };
  }

  /** The manifest of a model in the catalog or announced for one. */
  async manifestBytes(model: string): Promise<Buffer> {
    if (!this.announced.has(model)) this.modelState(model);
    return readFile(this.manifestPath(model));
  }

  // ---- changes -----------------------------------------------------------------------------------

  /** Registers a seed node or updates its URL (and its active flag when given). */
  registerNode(name: string, url: string, active?: boolean): Promise<CatalogNode> {
    return this.mutate(async () => {
      const known = this.nodes.get(name);
      if (known === undefined && this.nodes.size >= SEED_NODES_MAX) {
        throw new WeightcastError('LIMIT_EXCEEDED', `the catalog already has ${SEED_NODES_MAX} nodes`);
      }
      const node: CatalogNode = { name, url, active: active ?? known?.active ?? true };
      if (known !== undefined && known.url === node.url && known.active === node.active) return node;
      await this.append({ type: 'node', ...node });
      return node;
    });
  }

  /**
   * Adds a model with its first placement (every entry at version 1). A model already present with
   * the same holders is accepted as is (a `put` run again); different holders are a conflict.
   */
  createModel(manifest: Manifest, holders: readonly (readonly string[])[]): Promise<ModelSnapshot> {
    return this.mutate(async () => {
      const model = manifestDigest(manifest).slice('sha256:'.length);
      const sizes = pieceSizes(manifest);
      if (sizes.length > SEED_PIECES_MAX) {
        throw new WeightcastError('LIMIT_EXCEEDED', `at most ${SEED_PIECES_MAX} pieces per model`);
      }
      if (holders.length !== sizes.length) {
        throw new WeightcastError(
          'SEED_PLAN_INVALID',
          `the model has ${sizes.length} pieces but ${holders.length} holder lists were given`,
        );
      }
      holders.forEach((list, piece) => this.checkHolders(piece, list));
      const existing = this.models.get(model);
      if (existing !== undefined) {
        const same = existing.entries.every((entry, piece) => sameList(entry.holders, holders[piece]!));
        if (!same) {
          throw new WeightcastError(
            'SEED_CATALOG_CONFLICT',
            `model ${model} is already in the catalog with another placement; use distribute to change it`,
          );
        }
        return this.snapshot(model);
      }
      if (this.models.size >= CATALOG_MODELS_MAX) {
        throw new WeightcastError('LIMIT_EXCEEDED', `the catalog already has ${CATALOG_MODELS_MAX} models`);
      }
      await this.writeManifest(model, manifest);
      const pieces = sizes.map((sizeBytes, index) => ({
        index,
        sizeBytes,
        holders: [...holders[index]!],
        version: 1,
      }));
      await this.append({ type: 'model', model, pieceSize: manifest.pieceSize, pieces });
      this.announced.delete(model);
      return this.snapshot(model);
    });
  }

  /**
   * Files a model's manifest before any piece of it is placed: `put` announces, sends the pieces,
   * then creates the model. Idempotent; announced and created models together stay under the cap.
   */
  announceModel(manifest: Manifest): Promise<void> {
    return this.mutate(async () => {
      const model = manifestDigest(manifest).slice('sha256:'.length);
      if (this.models.has(model) || this.announced.has(model)) return;
      if (this.models.size + this.announced.size >= CATALOG_MODELS_MAX) {
        throw new WeightcastError('LIMIT_EXCEEDED', `the catalog already has ${CATALOG_MODELS_MAX} models`);
      }
      await this.writeManifest(model, manifest);
      this.announced.add(model);
    });
  }

  /**
   * Compare-and-swap per entry: an update applies only if the entry's version is still
   * `expectVersion`; it then takes the new holders and version + 1. Updates in one call are checked
   * in order (a later update of the same piece sees the earlier one) and made durable together.
   */
  commit(model: string, updates: readonly CommitUpdate[]): Promise<CommitResult[]> {
    return this.mutate(async () => {
      const state = this.modelState(model);
      const versions = new Map<number, number>();
      const results: CommitResult[] = [];
      const entries: Array<{ piece: number; holders: string[]; version: number }> = [];
      for (const update of updates) {
        const entry = state.entries[update.piece];
        if (entry === undefined) {
          throw new WeightcastError('SEED_PLAN_INVALID', `model ${model} has no piece ${update.piece}`);
        }
        this.checkHolders(update.piece, update.holders);
        const current = versions.get(update.piece) ?? entry.version;
        if (current !== update.expectVersion) {
          results.push({ piece: update.piece, ok: false, version: current });
          continue;
        }
        versions.set(update.piece, current + 1);
        entries.push({ piece: update.piece, holders: [...update.holders], version: current + 1 });
        results.push({ piece: update.piece, ok: true, version: current + 1 });
      }
      if (entries.length > 0) await this.append({ type: 'commit', model, entries });
      return results;
    });
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.queue.catch(() => undefined);
    await this.journal.close();
  }

  // ---- internals ---------------------------------------------------------------------------------

  private modelState(model: string): ModelState {
    const state = this.models.get(model);
    if (state === undefined) {
      throw new WeightcastError('SEED_UNKNOWN_MODEL', `the catalog has no model ${model}`, { model });
    }
    return state;
  }

  private checkHolders(piece: number, holders: readonly string[]): void {
    if (holders.length === 0 || new Set(holders).size !== holders.length) {
      throw new WeightcastError(
        'SEED_PLAN_INVALID',
        `piece ${piece}: holders must be distinct and not empty`,
      );
    }
    for (const name of holders) {
      if (!this.nodes.has(name)) {
        throw new WeightcastError(
          'SEED_UNKNOWN_NODE',
          `piece ${piece}: ${name} is not a registered seed node`,
          {
            node: name,
          },
        );
      }
    }
  }

  /** Runs changes one at a time, so each sees every change acknowledged before it. */
  private mutate<T>(change: () => Promise<T>): Promise<T> {
    if (this.closed) return Promise.reject(new WeightcastError('ABORTED', 'the catalog is closed'));
    if (this.broken !== undefined) {
      const error = new WeightcastError(
        'IO',
        'the catalog journal failed a write; restart the scheduler to recover from the journal',
        {},
        { cause: this.broken },
      );
      return Promise.reject(error);
    }
    const run = this.queue.then(change, change);
    this.queue = run.catch(() => undefined);
    return run;
  }

  /** Appends and fsyncs a record, then applies it; takes a snapshot when the journal has grown. */
  private async append(record: Record): Promise<void> {
    const seq = this.seq + 1;
    const line = encodeLine(seq, record);
    try {
      await this.journal.appendFile(line);
      await this.journal.datasync();
    } catch (error) {
      this.broken = error;
      throw error;
    }
    this.seq = seq;
    this.journalBytes += line.length;
    this.recordsSinceSnapshot++;
    this.apply(record);
    if (this.recordsSinceSnapshot >= this.snapshotEvery || this.journalBytes >= SNAPSHOT_EVERY_BYTES) {
      // The change is durable in the journal already; a failed snapshot is retried after the next one.
      await this.writeSnapshot().catch(() => undefined);
    }
  }

  private apply(record: Record): void {
    switch (record.type) {
      case 'node':
        this.nodes.set(record.name, { name: record.name, url: record.url, active: record.active });
        return;
      case 'model':
        this.models.set(record.model, {
          pieceSize: record.pieceSize,
          entries: record.pieces.map((piece) => ({
            sizeBytes: piece.sizeBytes,
            holders: [...piece.holders],
            version: piece.version,
          })),
        });
        return;
      case 'commit': {
        const state = this.models.get(record.model);
        assert(state !== undefined, `commit record for unknown model ${record.model}`);
        for (const change of record.entries) {
          const entry = state.entries[change.piece];
          assert(entry !== undefined, `commit record for unknown piece ${change.piece}`);
          entry.holders = [...change.holders];
          entry.version = change.version;
        }
        return;
      }
    }
  }

  private async writeSnapshot(): Promise<void> {
    const document: SnapshotFile = {
      format: 'weightcast-catalog',
      seq: this.seq,
      nodes: this.listNodes(),
      models: this.listModels().map((model) => {
        const snapshot = this.snapshot(model);
        return { model, pieceSize: snapshot.pieceSize, pieces: snapshot.pieces };
      }),
    };
    await writeDurably(this.dir, 'snapshot.json', Buffer.from(JSON.stringify(document)));
    this.snapshotSeq = this.seq;
    await this.journal.truncate(0);
    await this.journal.datasync();
    this.journalBytes = 0;
    this.recordsSinceSnapshot = 0;
  }

  private async load(): Promise<void> {
    const snapshotText = await readFile(join(this.dir, 'snapshot.json'), 'utf8').catch((error: unknown) => {
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
      throw error;
    });
    if (snapshotText !== undefined) this.loadSnapshot(snapshotText);
    const journal = await this.journal.readFile();
    let position = 0;
    let validEnd = 0;
    while (position < journal.length) {
      const newline = journal.indexOf(0x0a, position);
      if (newline < 0) break;
      const record = decodeLine(journal.subarray(position, newline).toString('utf8'));
      if (record === undefined) break;
      if (record.seq > this.seq) {
        if (record.seq !== this.seq + 1) break;
        this.apply(record.record);
        this.seq = record.seq;
        this.recordsSinceSnapshot++;
      }
      position = newline + 1;
      validEnd = position;
    }
    if (validEnd < journal.length) {
      // A torn or corrupt tail was never acknowledged: cut it off so new records follow good ones.
      await this.journal.truncate(validEnd);
      await this.journal.datasync();
    }
    this.journalBytes = validEnd;
    await this.loadAnnounced();
  }

  /** Manifests filed without a model record are announcements (a `put` that has not finished). */
  private async loadAnnounced(): Promise<void> {
    const names = await readdir(join(this.dir, 'manifests')).catch(() => [] as string[]);
    for (const name of names) {
      const model = /^([0-9a-f]{64})\.json$/.exec(name)?.[1];
      if (model !== undefined && !this.models.has(model)) this.announced.add(model);
    }
  }

  private loadSnapshot(text: string): void {
    let document: SnapshotFile;
    try {
      document = JSON.parse(text) as SnapshotFile;
    } catch (error) {
      throw new WeightcastError(
        'SEED_CATALOG_CORRUPT',
        `${join(this.dir, 'snapshot.json')} is not valid JSON`,
        {},
        { cause: error },
      );
    }
    if (document.format !== 'weightcast-catalog' || !Number.isSafeInteger(document.seq)) {
      throw new WeightcastError(
        'SEED_CATALOG_CORRUPT',
        `${join(this.dir, 'snapshot.json')} is not a catalog`,
      );
    }
    for (const node of document.nodes) this.apply({ type: 'node', ...node });
    for (const model of document.models) this.apply({ type: 'model', ...model });
    this.seq = document.seq;
    this.snapshotSeq = document.seq;
  }

  private manifestPath(model: string): string {
    return join(this.dir, 'manifests', `${model}.json`);
  }

  private async writeManifest(model: string, manifest: Manifest): Promise<void> {
    await writeDurably(join(this.dir, 'manifests'), `${model}.json`, encodeManifest(manifest));
  }

  /** The journal sequence the last snapshot holds (for tests and status). */
  get snapshotSequence(): number {
    return this.snapshotSeq;
  }
}

/** Parses and checks a manifest sent to the catalog against the model name it is filed under. */
export function checkedManifest(text: string, model: string): Manifest {
  const manifest = parseManifest(text, 'the manifest sent to the catalog');
  const digest = manifestDigest(manifest);
  if (digest !== `sha256:${model}`) {
    throw new WeightcastError(
      'MANIFEST_DIGEST_MISMATCH',
      `manifest digest is ${digest}, not sha256:${model}`,
    );
  }
  return manifest;
}

export function pieceSizes(manifest: Manifest): number[] {
  const sizes: number[] = [];
  for (const file of manifest.files) {
    file.pieces.forEach((_, piece) => {
      sizes.push(Math.min(manifest.pieceSize, file.size - piece * manifest.pieceSize));
    });
  }
  return sizes;
}

function sameList(a: readonly string[], b: readonly string[]): boolean {
  return a.length === b.length && a.every((name, index) => name === b[index]);
}

function encodeLine(seq: number, record: Record): Buffer {
  const json = JSON.stringify({ seq, record });
  const check = createHash('sha256').update(json).digest('hex').slice(0, 16);
  return Buffer.from(`${check} ${json}\n`, 'utf8');
}

function decodeLine(line: string): { seq: number; record: Record } | undefined {
  const space = line.indexOf(' ');
  if (space !== 16) return undefined;
  const json = line.slice(17);
  if (createHash('sha256').update(json).digest('hex').slice(0, 16) !== line.slice(0, 16)) return undefined;
  try {
    const parsed = JSON.parse(json) as { seq: number; record: Record };
    return Number.isSafeInteger(parsed.seq) ? parsed : undefined;
  } catch {
    return undefined;
  }
}

/** Write-and-rename: a temporary file, fsynced, renamed over `name`, then the directory fsynced. */
export async function writeDurably(dir: string, name: string, bytes: Uint8Array): Promise<void> {
  const temporary = join(dir, `${name}.tmp`);
  const handle = await open(temporary, 'w');
  try {
    await handle.writeFile(bytes);
    await handle.datasync();
  } finally {
    await handle.close();
  }
  await rename(temporary, join(dir, name));
  await syncDirectory(dir);
}

export async function syncDirectory(dir: string): Promise<void> {
  const handle = await open(dir, 'r');
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}
