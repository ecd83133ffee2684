/**
 * LocalOrigin reads a model from a directory (or one file) on a local or mounted filesystem.
 *
 * `list` walks the directory depth-first, skipping dot-entries (our own `.weightcast` state, `.cache`,
 * `.git`) and following symlinks to files (a Hugging Face cache snapshot is a tree of symlinks into
 * `blobs/`) but never symlinks to directories, which could loop. A directory with a
 * `model.safetensors.index.json` must hold every shard it names: an HTTP origin lists a model from
 * its index, and a directory missing a shard (a download cut short, a file deleted) is an incomplete
 * model that a listing of what is there would pull, hash and call done. `readInto` does positioned reads
 * straight into the caller's buffer through a small cache of open file handles, so many reads of one
 * shard share one descriptor and no bytes are copied twice.
 */

import { statSync, type Dirent, type Stats } from 'node:fs';
import { open, readFile, readdir, stat, type FileHandle } from 'node:fs/promises';
import { basename, dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { WeightcastError, throwIfAborted } from '../errors.js';
import { INDEX_BYTES_MAX, INDEX_FILE_NAME, indexShardFiles, parseIndexJson } from '../format/index-json.js';
import { assertSafeRelativePath } from '../util/safe-path.js';
import type { Origin, OriginCallOptions, OriginEntry, OriginStats } from './origin.js';

export interface LocalOriginOptions {
  /** Open file handles kept for reuse; the least recently used idle one is closed beyond this. */
  openFilesMax?: number;
  /** A listing larger than this fails with LIMIT_EXCEEDED instead of eating memory. */
  listEntriesMax?: number;
}

const OPEN_FILES_MAX_DEFAULT = 64;
const LIST_ENTRIES_MAX_DEFAULT = 100_000;
const LIST_DEPTH_MAX = 32;
/** Missing shards named in the error and its details; a model missing more says how many. */
const MISSING_SHARDS_NAMED_MAX = 10;

interface CachedHandle {
  handle: Promise<FileHandle>;
  readsInFlight: number;
}

type Root = { kind: 'directory'; dir: string } | { kind: 'file'; dir: string; name: string };

export class LocalOrigin implements Origin {
  readonly location: string;
  readonly stats: OriginStats = { requests: 0, retries: 0, bytesRead: 0 };
  private readonly rootPath: string;
  private readonly openFilesMax: number;
  private readonly listEntriesMax: number;
  private root: Promise<Root> | undefined;
  /** Insertion order is recency order: a use moves the entry to the end. */
  private readonly handles = new Map<string, CachedHandle>();
  private closed = false;

  constructor(source: string, options: LocalOriginOptions = {}) {
    this.rootPath = resolve(source.startsWith('file:') ? filePath(source) : source);
    this.location = pathToFileURL(this.rootPath).href;
    this.openFilesMax = Math.max(1, options.openFilesMax ?? OPEN_FILES_MAX_DEFAULT);
    this.listEntriesMax = options.listEntriesMax ?? LIST_ENTRIES_MAX_DEFAULT;
  }

  async list(options: OriginCallOptions = {}): Promise<OriginEntry[]> {
    throwIfAborted(options.signal, 'listing the local origin');
    this.stats.requests += 1;
    const root = await this.resolveRoot();
    if (root.kind === 'file') return [await this.stat(root.name, options)];
    const entries: OriginEntry[] = [];
    await this.walk(root.dir, '', 0, entries, options.signal);
    await this.checkIndexShards(root.dir, entries, options.signal);
    return entries.sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
  }

  async stat(path: string, options: OriginCallOptions = {}): Promise<OriginEntry> {
    throwIfAborted(options.signal, `stat of ${path}`);
    this.stats.requests += 1;
    const file = await this.filePath(path);
    const info = await statFile(file, path);
    return { path, size: info.size };
  }

  async readInto(
    path: string,
    offset: number,
    target: Uint8Array,
    options: OriginCallOptions = {},
  ): Promise<void> {
    checkRange(path, offset, target.length);
    throwIfAborted(options.signal, `read of ${path}`);
    this.stats.requests += 1;
    if (target.length === 0) return;
    const cached = await this.acquire(path);
    try {
      await readFully(await cached.handle, path, offset, target, options.signal, this.stats);
    } finally {
      cached.readsInFlight -= 1;
    }
  }

  /** The file itself, so hashing can read it directly instead of through `readInto`. */
  localPath(path: string): string {
    assertSafeRelativePath(path, this.location);
    if (statSync(this.rootPath, { throwIfNoEntry: false })?.isFile() === true) {
      if (path !== basename(this.rootPath)) {
        throw new WeightcastError(
          'ORIGIN_NOT_FOUND',
          `${this.location} holds only ${basename(this.rootPath)}, not ${path}`,
          {
            file: path,
          },
        );
      }
      return this.rootPath;
    }
    return join(this.rootPath, path);
  }

  async close(): Promise<void> {
    this.closed = true;
    const all = [...this.handles.values()];
    this.handles.clear();
    await Promise.allSettled(all.map(async (cached) => (await cached.handle).close()));
  }

  private resolveRoot(): Promise<Root> {
    this.root ??= describeRoot(this.rootPath);
    return this.root;
  }

  /** Maps a model-relative path to a filesystem path, refusing anything that could escape the root. */
  private async filePath(path: string): Promise<string> {
    assertSafeRelativePath(path, this.location);
    const root = await this.resolveRoot();
    if (root.kind === 'file' && path !== root.name) {
      throw new WeightcastError('ORIGIN_NOT_FOUND', `${this.location} holds only ${root.name}, not ${path}`, {
        file: path,
      });
    }
    return join(root.dir, path);
  }

  private async acquire(path: string): Promise<CachedHandle> {
    if (this.closed) throw new WeightcastError('ORIGIN_IO', `${this.location} is closed`, { file: path });
    let cached = this.handles.get(path);
    if (cached === undefined) {
      const file = await this.filePath(path);
      // Another read of the same file may have opened it while this one resolved the path.
      cached = this.handles.get(path);
      if (cached === undefined) {
        cached = { handle: openFile(file, path), readsInFlight: 0 };
        this.evictIdle();
      } else {
        this.handles.delete(path);
      }
    } else {
      this.handles.delete(path);
    }
    this.handles.set(path, cached);
    cached.readsInFlight += 1;
    try {
      await cached.handle;
    } catch (error) {
      cached.readsInFlight -= 1;
      if (this.handles.get(path) === cached) this.handles.delete(path);
      throw error;
    }
    return cached;
  }

  /** Closes least recently used handles with no read in flight until there is room for one more. */
  private evictIdle(): void {
    for (const [path, cached] of this.handles) {
      if (this.handles.size < this.openFilesMax) return;
      if (cached.readsInFlight > 0) continue;
      this.handles.delete(path);
      cached.handle.then(
        (handle) => handle.close(),
        () => undefined,
      );
    }
  }

  /**
   * Fails with INDEX_SHARD_MISSING, naming the files, when the directory's index names shards the
   * listing lacks; with INDEX_INVALID when the index cannot be read as one, as an HTTP origin does.
   */
  private async checkIndexShards(
    dir: string,
    entries: readonly OriginEntry[],
    signal: AbortSignal | undefined,
  ): Promise<void> {
    const index = entries.find((entry) => entry.path === INDEX_FILE_NAME);
    if (index === undefined) return;
    const file = join(dir, INDEX_FILE_NAME);
    if (index.size > INDEX_BYTES_MAX) {
      throw new WeightcastError('LIMIT_EXCEEDED', `${file} is larger than ${INDEX_BYTES_MAX} bytes`, {
        file: INDEX_FILE_NAME,
      });
    }
    const listed = new Set(entries.map((entry) => entry.path));
    const shards = indexShardFiles(parseIndexJson(await readText(file, signal), file));
    const missing = shards.filter((shard) => !listed.has(shard));
    if (missing.length === 0) return;
    const named = missing.slice(0, MISSING_SHARDS_NAMED_MAX);
    const more = missing.length > named.length ? ` and ${missing.length - named.length} more` : '';
    throw new WeightcastError(
      'INDEX_SHARD_MISSING',
      `${this.rootPath} is incomplete: its ${INDEX_FILE_NAME} names ${countShards(missing.length)} of ` +
        `${shards.length} that ${missing.length === 1 ? 'is' : 'are'} not there: ${named.join(', ')}${more}`,
      { file: INDEX_FILE_NAME, missing: named, missingCount: missing.length },
    );
  }

  private async walk(
    dir: string,
    prefix: string,
    depth: number,
    out: OriginEntry[],
    signal: AbortSignal | undefined,
  ): Promise<void> {
    throwIfAborted(signal, 'listing the local origin');
    if (depth > LIST_DEPTH_MAX) {
      throw new WeightcastError('LIMIT_EXCEEDED', `${dir} is nested deeper than ${LIST_DEPTH_MAX} levels`);
    }
    for (const dirent of await readDirectory(dir)) {
      if (dirent.name.startsWith('.')) continue;
      const path = prefix + dirent.name;
      const kind = await entryKind(join(dir, dirent.name), dirent);
      if (kind.type === 'directory')
        await this.walk(join(dir, dirent.name), path + '/', depth + 1, out, signal);
      if (kind.type !== 'file') continue;
      if (out.length >= this.listEntriesMax) {
        throw new WeightcastError(
          'LIMIT_EXCEEDED',
          `${this.location} has more than ${this.listEntriesMax} files`,
        );
      }
      out.push({ path, size: kind.size });
    }
  }
}

async function describeRoot(rootPath: string): Promise<Root> {
  const info = await statFile(rootPath, rootPath, true);
  if (info.isDirectory()) return { kind: 'directory', dir: rootPath };
  return { kind: 'file', dir: dirname(rootPath), name: basename(rootPath) };
}

async function statFile(file: string, path: string, allowDirectory = false): Promise<Stats> {
  let info: Stats;
  try {
    info = await stat(file);
  } catch (error) {
    throw fsError(error, path);
  }
  if (!info.isFile() && !(allowDirectory && info.isDirectory())) {
    throw new WeightcastError('ORIGIN_NOT_FOUND', `${path} is not a regular file`, { file: path });
  }
  return info;
}

type EntryKind = { type: 'file'; size: number } | { type: 'directory' } | { type: 'other' };

/** Regular files and symlinks to them count as files; only real directories are descended into. */
async function entryKind(file: string, dirent: Dirent): Promise<EntryKind> {
  if (dirent.isDirectory()) return { type: 'directory' };
  if (!dirent.isFile() && !dirent.isSymbolicLink()) return { type: 'other' };
  try {
    const info = await stat(file);
    return info.isFile() ? { type: 'file', size: info.size } : { type: 'other' };
  } catch {
    return { type: 'other' };
  }
}

async function readText(file: string, signal: AbortSignal | undefined): Promise<string> {
  try {
    return await readFile(file, { encoding: 'utf8', ...(signal === undefined ? {} : { signal }) });
  } catch (error) {
    throwIfAborted(signal, `reading ${file}`);
    throw fsError(error, file);
  }
}

function countShards(count: number): string {
  return `${count} ${count === 1 ? 'shard' : 'shards'}`;
}

async function readDirectory(dir: string): Promise<Dirent[]> {
  try {
    return await readdir(dir, { withFileTypes: true });
  } catch (error) {
    throw fsError(error, dir);
  }
}

async function openFile(file: string, path: string): Promise<FileHandle> {
  try {
    return await open(file, 'r');
  } catch (error) {
    throw fsError(error, path);
  }
}

async function readFully(
  handle: FileHandle,
  path: string,
  offset: number,
  target: Uint8Array,
  signal: AbortSignal | undefined,
  stats: OriginStats,
): Promise<void> {
  let filled = 0;
  // Each pass reads at least one byte or stops, so the loop runs at most target.length times.
  while (filled < target.length) {
    throwIfAborted(signal, `read of ${path}`);
    let bytesRead: number;
    try {
      ({ bytesRead } = await handle.read(target, filled, target.length - filled, offset + filled));
    } catch (error) {
      throw fsError(error, path);
    }
    if (bytesRead === 0) {
      throw new WeightcastError(
        'ORIGIN_SHORT_READ',
        `${path}: the file ends before byte ${offset + target.length} (read ${filled} of ${target.length} bytes at ${offset})`,
        { file: path, offset, length: target.length },
      );
    }
    filled += bytesRead;
    stats.bytesRead += bytesRead;
  }
}

function checkRange(path: string, offset: number, length: number): void {
  if (!Number.isSafeInteger(offset) || offset < 0 || !Number.isSafeInteger(offset + length)) {
    throw new WeightcastError('ORIGIN_IO', `${path}: invalid read offset ${offset}`, { file: path, offset });
  }
}

function fsError(error: unknown, path: string): WeightcastError {
  const code = (error as NodeJS.ErrnoException | undefined)?.code;
  if (code === 'ENOENT' || code === 'ENOTDIR') {
    return new WeightcastError(
      'ORIGIN_NOT_FOUND',
      `${path} does not exist`,
      { file: path },
      { cause: error },
    );
  }
  return new WeightcastError(
    'ORIGIN_IO',
    `${path}: ${String(code ?? error)}`,
    { file: path },
    { cause: error },
  );
}

/** A file:// URL as a path; `file://relative/x` names a host, which a local origin cannot read. */
function filePath(url: string): string {
  try {
    return fileURLToPath(url);
  } catch (error) {
    throw new WeightcastError(
      'ORIGIN_UNSUPPORTED',
      `${url} is not a local file URL (${(error as Error).message}); write file:///absolute/path or a plain path`,
      { file: url },
      { cause: error },
    );
  }
}
