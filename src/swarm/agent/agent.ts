/**
 * `weightcast agent`: a long-running swarm host. One HTTP server carries two APIs:
 *  - the peer API other agents fetch pieces from (`/v1/models/...`), bounded by upload slots and
 *    answering overload with 503 SWARM_BUSY + Retry-After, capped by `--upload-mbps`;
 *  - the local API for the same machine (`/v1/local/...`): join a model, ask its progress, and read
 *    its files by byte range, a read blocking until the pieces under it are verified and marking
 *    them urgent (lazy loading).
 * Each joined model is a SwarmMember over a PieceStore whose state is in `<cache>/<model hex>/`. The
 * job (source, manifest, destination) is saved there too, so an agent restarted on the same cache
 * resumes every model with the pieces it already verified.
 *
 * Where the files go: a join that names a destination (`to`, what `weightcast pull --to DIR` asks
 * for) has the model's pieces written straight into that directory: partial files under
 * `DIR/.weightcast/agent/`, each renamed to its final name once every piece of it is verified and
 * synced, and served to peers from there. A model is written once, however it reaches the user. A
 * join without a destination keeps the files in `<cache>/<hex>/files/`.
 *
 * An agent listening on a non-loopback address also answers the local API on 127.0.0.1 at the same
 * port, so a pull on the host finds it without being told where it is.
 */

import { createHash, randomBytes } from 'node:crypto';
import { unlinkSync, writeFileSync } from 'node:fs';
import { mkdir, readFile, readdir, realpath, rm, stat, writeFile } from 'node:fs/promises';
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { hostname } from 'node:os';
import { basename, dirname, isAbsolute, join, resolve, sep } from 'node:path';
import * as s from '../../util/schema.js';
import { Gate, type Role, type ServiceCredentials } from '../../auth/gate.js';
import {
  assertListenAllowed,
  createServiceServer,
  schemeOf,
  type ServerTls,
  type ServiceAccess,
} from '../../auth/transport.js';
import { WeightcastError, isWeightcastError } from '../../errors.js';
import { takePidLock } from '../../util/pid-lock.js';
import {
  checkMerkleRootSteps,
  encodeManifest,
  manifestDigest,
  parseManifest,
  type Manifest,
} from '../../manifest/manifest.js';
import { openOrigin } from '../../origin/open.js';
import type { Origin } from '../../origin/origin.js';
import type { RetryEvent } from '../../origin/http.js';
import { Throttle } from '../../util/throttle.js';
import { PieceMap } from '../../piece/piece-map.js';
import {
  ASSIGNMENT_BYTES_MAX,
  encodeBitfield,
  modelHex,
  parseMessage,
  syncReplySchema,
} from '../wire/protocol.js';
import { callJson, readJsonBody, sendError, sendJson } from '../wire/http-json.js';
import { listenOn } from '../../util/listen.js';
import { PEER_WIRE_PATH } from '../wire/peer-frames.js';
import { SwarmMember, type MemberEvent } from './member.js';
import { OpeningStore, type MemberStore } from './member-store.js';
import { PeerWireServer, type ServedModel } from './peer-wire-server.js';
import { PeersKeeper, readKeptPeers } from './kept-peers.js';
import { PieceStore, type PieceStoreOptions } from '../../piece/store.js';
import { UploadSlots } from './upload-slots.js';
import { enableDirectIo } from '../../piece/direct-io.js';
import { createLimitedServer, resolveLimits, type ServerLimits } from '../../util/server-limits.js';
import { pathWithoutSymlinks } from '../../util/no-symlinks.js';
import { writeDone } from '../../util/write-done.js';
import { TCP_CONGESTION_DEFAULT, congestionSetterFor } from '../../util/tcp-congestion.js';
import { RecentBudget, type Borrowed } from './recent-pieces.js';

export interface AgentOptions {
  schedulerUrl: string;
  /** Where pieces are kept; one folder per model. */
  cacheDir: string;
  host?: string;
  port?: number;
  /** The URL peers use to reach this agent, when it differs from the listening address. */
  advertiseUrl?: string;
  /** Stable name in the swarm; default: kept in `<cache>/agent.json`, made up on first start. */
  name?: string;
  zone?: string;
  rack?: string;
  /** Caps this agent enforces on itself; undefined = no cap. */
  uploadBytesPerSecond?: number;
  downloadBytesPerSecond?: number;
  /**
   * Write verified pieces to disk and read them back for peers with O_DIRECT, past the page cache,
   * where the file system allows it (src/piece/direct-io.ts). Default true.
   */
  directIo?: boolean;
  /** Concurrent piece uploads; more requests get 503 SWARM_BUSY. Default 8. */
  uploadsMax?: number;
  /**
   * Memory for the runs of pieces verified last, lent to uploads and local reads, for all models
   * together. Default: 32 pieces of the largest-piece model joined, 16-256 MiB (recent-pieces.ts);
   * 0 keeps none (every upload is read from disk).
   */
  recentBytes?: number;
  /** Concurrent piece downloads per model. Default 8. */
  downloadsMax?: number;
  /**
   * Directories under which a join may name its destination (`to`): the agent writes a model
   * there with its own user's rights, for any process that can reach its local API, so only where
   * the operator says. Without any, a join's destination is refused (FORBIDDEN) and the pull
   * places the files itself from the agent's cache.
   */
  destinationRoots?: readonly string[];
  /** How long a request's head and body may take to arrive; default 30 s. */
  requestTimeoutMs?: number;
  /**
   * The other limits of its servers (src/util/server-limits.ts): both servers and the seed node's
   * routes share one body budget.
   */
  limits?: Partial<ServerLimits>;
  /** Fault injection for tests: flip one byte of every piece this agent serves. */
  corruptUploads?: boolean;
  /** Fault injection for tests: a model's store begins to open once this resolves (a slow disk). */
  slowStoreOpen?: () => Promise<void>;
  /**
   * Read pieces from peers over the peer wire (default true; false: HTTP ranges, as before it).
   * The agent serves both either way.
   */
  peerWire?: boolean;
  /**
   * How long one origin read retries an origin that fails transiently (an outage) before the model
   * stops with ORIGIN_RETRIES_EXHAUSTED (`--origin-retry-s`). Default 60 000.
   */
  originRetryBudgetMs?: number;
  /** How often to look for models whose files were deleted under the agent; default REMOVED_CHECK_MS. */
  removedCheckMs?: number;
  /** Resume the models found in the cache. Default true. */
  resume?: boolean;
  onEvent?: (event: AgentEvent) => void;
  /** `--role seed`: the seed node's routes, answered under `/v1/seed` (src/seed/node). */
  seedRoutes?: (req: IncomingMessage, res: ServerResponse, role: Role) => Promise<void>;
  /**
   * Who may use the peer API (HTTP routes and the peer wire) and the seed routes: the cluster
   * token's holders, and for seed changes the operator's. None: anyone (loopback demos). The local
   * API needs no token: it answers only this machine (and no web page).
   */
  credentials?: ServiceCredentials;
  /** What this agent sends to the scheduler and its peers. */
  access?: ServiceAccess;
  /** Serve the peer API (and the local API on the main port) with HTTPS. */
  tls?: ServerTls;
  /** Listen on a non-loopback address without credentials (else refused: USAGE). */
  insecure?: boolean;
  /**
   * The TCP congestion control of the connections peers open to this agent, which carry what it
   * sends them (src/util/tcp-congestion.ts): 'auto' (default: the system's, but cubic where that is
   * bbr), 'system', or an algorithm the kernel offers (USAGE otherwise).
   */
  tcpCongestion?: string;
}

export type AgentEvent =
  | { type: 'joined'; model: string; pieces: number; held: number }
  | ({ model: string } & MemberEvent)
  | { type: 'resume-failed'; model: string; reason: string }
  /** A model that had stopped for good (`code`) is not resumed at start; a pull for it joins it again. */
  | { type: 'not-resumed'; model: string; code: string; reason: string }
  | { type: 'removed'; model: string; path: string }
  | { type: 'loopback-unavailable'; reason: string }
  /** Connections from peers keep the system's congestion control: `wanted` could not be set. */
  | { type: 'tcp-congestion-kept'; wanted: string; reason: string }
  | ({ type: 'origin-retry'; model: string } & Omit<RetryEvent, 'error'>);

export interface JoinOptions {
  source: string;
  manifest: Manifest;
  token?: string;
  /**
   * The directory the user wants the model in (absolute). A model this agent has not joined yet is
   * written there directly; one it already holds elsewhere stays where it is (see `filesAt`).
   */
  to?: string;
  /** Where the model's pieces go; default `<cache>/<hex>/files`, state in `<cache>/<hex>/`. */
  store?: PieceStoreOptions;
  /**
   * The manifest was parsed without its Merkle roots (`merkleRoots: 'skip'`): the join checks them
   * once its member has started, over turns of the event loop; no file is finished before
   * they match, and a mismatch stops the model (MANIFEST_DIGEST_MISMATCH). At 65,536 pieces the roots
   * are ~100 ms of hashing that the first requests need not wait for: each piece is checked against
   * its own digest either way.
   */
  merkleRootsUnchecked?: boolean;
}

export interface ModelStatus {
  model: string;
  fileCount: number;
  pieceCount: number;
  held: number;
  heldBytes: number;
  complete: boolean;
  totalBytes: number;
  originBytes: number;
  peerBytes: number;
  corruptPieces: number;
  duplicateBytes: number;
  /** Peer uploads answered from memory (the runs verified last) and from disk. */
  uploadsFromMemory?: number;
  uploadsFromDisk?: number;
  /** Pieces of local API reads sent from memory, for the same reason. */
  localPiecesFromMemory?: number;
  registered: boolean;
  /**
   * Once complete: the directory holding the verified files on this machine, so a pull on the same
   * host can place them (or read them) from disk instead of through the local API.
   */
  filesDir?: string;
  /**
   * Whose directory `filesDir` is: the agent's own cache (nobody else writes there, so a copy needs
   * no second hash) or a destination a join named (the user's, who may have changed it since).
   */
  filesAt?: 'cache' | 'destination';
  /** Why the model stopped on this host (a disk that cannot take its pieces); nothing more is fetched. */
  failed?: { code: string; message: string };
}

interface Joined {
  hex: string;
  /** The destination the model is written into, when its join named one. */
  to: string | undefined;
  map: PieceMap;
  store: PieceStore;
  origin: Origin;
  member: SwarmMember;
  /** Peer uploads (peer wire and HTTP) from the member's recent pieces in memory, and from the store. */
  uploadsFromMemory: number;
  uploadsFromDisk: number;
  /** Pieces of local API reads sent from the recent pieces in memory (the others from the store). */
  localPiecesFromMemory: number;
}

/** A model whose member runs while its store opens (Agent.opening). */
interface OpeningModel {
  map: PieceMap;
  member: SwarmMember;
  store: OpeningStore;
}

/** Assumed link rate when no cap is given: only ranks parents in the scheduler. */
const RATE_UNKNOWN = 1.25e9;
const LOCAL_READS_MAX = 32;
/** Longest a local status request may wait for the model to complete. */
const LOCAL_STATUS_WAIT_MS_MAX = 60_000;
const UPLOAD_CHUNK_BYTES = 256 * 1024;
/** How long a request (head and body) may take to arrive. */
const REQUEST_TIMEOUT_MS = 30_000;
/** How often the agent looks for models whose files were deleted under it (forgetIfRemoved). */
export const REMOVED_CHECK_MS = 10_000;

const absolutePath = s.string({ min: 1, max: 4096, refine: [isAbsolute, 'must be an absolute path'] });

const joinSchema = s.object({
  source: s.string({ min: 1, max: 4096 }),
  /** Canonical manifest JSON. */
  manifest: s.string({ min: 2 }),
  token: s.optional(s.string({ max: 8192 })),
  /** The destination directory, absolute. */
  to: s.optional(absolutePath),
});

/**
 * What a model's folder in the cache records of its join, to resume it after a restart; `stopped`
 * once the model stopped for good (the origin answered 404, a full disk, wrong bytes from the origin).
 */
const savedJobSchema = s.object({
  source: s.string(),
  to: s.optional(absolutePath),
  stopped: s.optional(s.object({ code: s.string({ max: 64 }), message: s.string({ max: 4096 }) })),
});
const savedNameSchema = s.object({ name: s.string({ min: 1 }) });

/** Where a join with a destination keeps its partial files: inside the destination, one rename away. */
export const AGENT_PARTIAL_DIR = join('.weightcast', 'agent');

export class Agent {
  private readonly joined = new Map<string, Joined>();
  /**
   * Models whose member started while their store opens (a fresh cache: OpeningStore), until the
   * store is open: the peer wire serves them already (servedModel), so a ring child the scheduler
   * planned behind this host subscribes at once instead of being turned away and asking again.
   */
  private readonly opening = new Map<string, OpeningModel>();
  private readonly joining = new Map<string, Promise<Joined>>();
  private readonly uploadThrottle: Throttle;
  private readonly downloadThrottle: Throttle;
  private readonly uploads: UploadSlots;
  /** Memory for the runs the agent's models verified last, lent to uploads and local reads. */
  private readonly recentBudget: RecentBudget;
  /** Stores write with O_DIRECT (AgentOptions.directIo, where the cache's file system allows it). */
  private directIo = false;
  private readonly peerWire: PeerWireServer;
  private readonly gate: Gate;
  private localReads = 0;
  private server!: Server;
  /** The local API on 127.0.0.1, when the main server listens elsewhere. */
  private loopbackServer: Server | undefined;
  /** Limits both servers share (one body budget among them). */
  private limits: ServerLimits | undefined;
  private closing = false;
  private removalTimer: ReturnType<typeof setInterval> | undefined;
  /** Models being forgotten because their files were deleted (forgetIfRemoved). */
  private readonly forgetting = new Map<string, Promise<void>>();
  /** Releases the cache's lock (see lockCache). */
  private releaseCache: (() => Promise<void>) | undefined;
  url = '';
  name = '';

  private constructor(private readonly options: AgentOptions) {
    this.uploadThrottle = new Throttle(options.uploadBytesPerSecond);
    this.downloadThrottle = new Throttle(options.downloadBytesPerSecond);
    this.uploads = new UploadSlots(options.uploadsMax ?? 8);
    this.recentBudget =
      options.recentBytes === undefined ? new RecentBudget() : new RecentBudget(options.recentBytes, true);
    this.gate = new Gate(options.credentials);
    this.peerWire = new PeerWireServer({
      model: (hex) => this.servedModel(hex),
      authenticate: (credential) => this.gate.roleOfSecret(credential) !== undefined,
      uploads: this.uploads,
      throttle: this.uploadThrottle,
      ...(options.corruptUploads === true ? { corruptUploads: true } : {}),
    });
  }

  static async start(options: AgentOptions): Promise<Agent> {
    const agent = new Agent(options);
    await mkdir(options.cacheDir, { recursive: true });
    agent.releaseCache = await lockCache(options.cacheDir);
    try {
      agent.directIo = options.directIo !== false && enableDirectIo(options.cacheDir);
      agent.name = options.name ?? (await agent.loadName());
      await agent.listen();
      await agent.warmUp();
      if (options.resume !== false) await agent.resumeAll();
      agent.watchRemovals();
    } catch (error) {
      await agent.close().catch(() => undefined);
      await agent.unlockCache();
      throw error;
    }
    return agent;
  }

  /** Joins the swarm of a model (idempotent); resolves once the member is running. */
  async join(options: JoinOptions): Promise<ModelStatus> {
    // The canonical bytes, encoded once: at 65,536 pieces an encoding costs ~10 ms, and the join
    // needs the name, the job file and the store's identity.
    const manifestBytes = encodeManifest(options.manifest);
    const hex = createHash('sha256').update(manifestBytes).digest('hex');
    // A model being forgotten (its files were deleted) is gone, state and all, before it is joined anew.
    await this.forgetting.get(hex);
    const existing = this.joined.get(hex) ?? (await this.joining.get(hex));
    // A model that stopped on a disk error is joined afresh: the user may have made room since;
    // so is one whose files were deleted under it.
    if (existing?.member.failure !== undefined) await this.drop(existing);
    else if (existing !== undefined && !(await this.forgetIfRemoved(existing)))
      return this.statusOf(existing);
    const pending = this.doJoin(hex, manifestBytes, options);
    this.joining.set(hex, pending);
    try {
      return this.statusOf(await pending);
    } finally {
      this.joining.delete(hex);
    }
  }

  status(hex: string): ModelStatus {
    return this.statusOf(this.model(hex));
  }

  /** Resolves when the model is complete on this host. */
  async whenComplete(hex: string): Promise<void> {
    await this.model(hex).member.complete;
  }

  /**
   * Long poll: returns when the model is complete or stopped (the status then says why), `waitMs`
   * passed, or the client went away.
   */
  private async waitComplete(hex: string, waitMs: number, res: ServerResponse): Promise<void> {
    const complete = this.model(hex).member.complete.catch(() => undefined);
    let timer: ReturnType<typeof setTimeout> | undefined;
    let onClose: (() => void) | undefined;
    await Promise.race([
      complete,
      new Promise<void>((resolve) => {
        timer = setTimeout(resolve, waitMs);
        onClose = resolve;
        res.once('close', onClose);
      }),
    ]);
    clearTimeout(timer);
    if (onClose !== undefined) res.off('close', onClose);
  }

  /**
   * A model whose files someone deleted (its destination folder, or the cache's copy) is forgotten:
   * its store closed (open files would keep the disk space), its state removed (a restart would
   * otherwise fetch it into that folder again), the loss said. Returns whether it was.
   */
  private async forgetIfRemoved(entry: Joined): Promise<boolean> {
    const path = await entry.store.removedFile();
    if (path === undefined || this.joined.get(entry.hex) !== entry) return false;
    this.joined.delete(entry.hex);
    const forgotten = (async () => {
      await this.drop(entry);
      await rm(join(this.options.cacheDir, entry.hex), { recursive: true, force: true }).catch(
        () => undefined,
      );
      this.options.onEvent?.({ type: 'removed', model: entry.hex, path });
    })();
    this.forgetting.set(entry.hex, forgotten);
    try {
      await forgotten;
    } finally {
      this.forgetting.delete(entry.hex);
    }
    return true;
  }

  /** Looks for models whose files were deleted, every `removedCheckMs` (see forgetIfRemoved). */
  private watchRemovals(): void {
    this.removalTimer = setInterval(() => {
      for (const entry of this.joined.values()) void this.forgetIfRemoved(entry);
    }, this.options.removedCheckMs ?? REMOVED_CHECK_MS);
    this.removalTimer.unref();
  }

  private async drop(entry: Joined): Promise<void> {
    if (this.joined.get(entry.hex) === entry) this.joined.delete(entry.hex);
    await Promise.allSettled([entry.member.close(), entry.store.close(), entry.origin.close()]);
  }

  member(hex: string): SwarmMember {
    return this.model(hex).member;
  }

  async close(): Promise<void> {
    if (this.closing) return;
    this.closing = true;
    clearInterval(this.removalTimer);
    this.peerWire.close();
    this.server.closeAllConnections();
    this.loopbackServer?.closeAllConnections();
    this.loopbackServer?.close();
    const closed = new Promise<void>((resolve) => this.server.close(() => resolve()));
    await Promise.allSettled(
      [...this.joined.values()].map(async (entry) => {
        await entry.member.close();
        await entry.store.close();
        await entry.origin.close();
      }),
    );
    await closed;
    await this.unlockCache();
  }

  /** Lets another agent use the cache (once: the lock file may be another agent's afterwards). */
  private async unlockCache(): Promise<void> {
    const release = this.releaseCache;
    this.releaseCache = undefined;
    await release?.();
  }

  // ---- models ----------------------------------------------------------------------------------

  private model(hex: string): Joined {
    const entry = this.joined.get(hex);
    if (entry === undefined)
      throw new WeightcastError('SWARM_UNKNOWN_MODEL', `this agent has not joined model ${hex}`);
    return entry;
  }

  private statusOf(entry: Joined): ModelStatus {
    return {
      model: entry.hex,
      fileCount: entry.map.manifest.files.length,
      pieceCount: entry.map.pieceCount,
      held: entry.store.heldCount,
      heldBytes: entry.store.heldBytes,
      complete: entry.store.complete,
      totalBytes: entry.map.totalBytes,
      originBytes: entry.member.stats.originBytes,
      peerBytes: entry.member.stats.peerBytes,
      corruptPieces: entry.member.stats.corruptPieces,
      duplicateBytes: entry.member.stats.duplicateBytes,
      uploadsFromMemory: entry.uploadsFromMemory,
      uploadsFromDisk: entry.uploadsFromDisk,
      localPiecesFromMemory: entry.localPiecesFromMemory,
      registered: entry.member.registeredHost !== undefined,
      ...(entry.member.failure === undefined
        ? {}
        : { failed: { code: entry.member.failure.code, message: entry.member.failure.message } }),
      ...(entry.store.complete
        ? { filesDir: entry.store.filesDirectory, filesAt: entry.to === undefined ? 'cache' : 'destination' }
        : {}),
    };
  }

  private async doJoin(hex: string, manifestBytes: Buffer, options: JoinOptions): Promise<Joined> {
    const map = new PieceMap(options.manifest);
    const modelDir = join(this.options.cacheDir, hex);
    const to =
      options.store === undefined && options.to !== undefined
        ? await this.allowedDestination(options.to)
        : undefined;
    const directIo = this.directIo;
    let startRootsCheck = (): void => undefined;
    const rootsCheck =
      options.merkleRootsUnchecked === true
        ? new Promise<void>((resolve) => (startRootsCheck = resolve)).then(() =>
            checkRootsInTurns(options.manifest),
          )
        : undefined;
    // It starts once the member has (below: at once for a member started while the store opens);
    // its outcome is taken by the store (before it finishes a file) and by the member.
    rootsCheck?.catch(() => undefined);
    // The agent's own stores: state in the model folder, named by the digest computed above (the
    // store would encode the manifest again for it), pieces in the cache or beside the destination.
    const ownStore = {
      stateDir: modelDir,
      identity: `sha256:${hex}`,
      directIo,
      checkSpace: true,
      inlineWrites: true,
    };
    const storeOptions = withManifestCheck(
      rootsCheck,
      options.store ??
        (to === undefined
          ? { ...ownStore, dataDir: join(modelDir, 'files') }
          : {
              ...ownStore,
              dataDir: await pathWithoutSymlinks(to, AGENT_PARTIAL_DIR.split(sep).join('/')),
              finalDir: to,
            }),
    );
    // Read before the store starts opening: nothing may wait between that and its outcome's handling.
    const keptPeers = await readKeptPeers(modelDir);
    const peersKeeper = new PeersKeeper(modelDir);
    // A model folder this join makes goes again if the join fails: a restarted agent must not resume
    // a join that never happened (it would fetch a model no pull asked for, into its destination).
    const madeModelDir =
      options.store === undefined && (await stat(modelDir).catch(() => undefined)) === undefined;
    await mkdir(storeOptions.stateDir, { recursive: true });
    // The job files (what a restarted agent resumes from) are written while the store opens.
    const job = { source: options.source, ...(to === undefined ? {} : { to }) };
    const jobFiles =
      options.store === undefined
        ? Promise.all([
            writeFile(join(modelDir, 'manifest.json'), manifestBytes),
            writeFile(join(modelDir, 'job.json'), JSON.stringify(job) + '\n'),
          ])
        : Promise.resolve([]);
    const origin = openOrigin(options.source, {
      files: options.manifest.files.map((file) => ({ path: file.path, size: file.size })),
      ...(options.token === undefined ? {} : { token: options.token }),
      ...(this.options.originRetryBudgetMs === undefined
        ? {}
        : { retryBudgetMs: this.options.originRetryBudgetMs }),
      // The event without the error object: what a log line or JSON event needs.
      onRetry: ({ error: _error, ...retry }) =>
        this.options.onEvent?.({ type: 'origin-retry', model: hex, ...retry }),
    });
    // A cache without a store state file opens empty: its member registers and starts fetching while
    // the files are created (OpeningStore); any other waits for the store to know what it holds.
    const fresh =
      options.store === undefined &&
      (await PieceStore.opensEmpty(storeOptions.stateDir)) &&
      (to === undefined || !(await PieceStore.hasFinalFiles(map, to)));
    const slowDisk = this.options.slowStoreOpen;
    const opening =
      slowDisk === undefined
        ? PieceStore.open(map, storeOptions)
        : slowDisk().then(() => PieceStore.open(map, storeOptions));
    // A member started early (below) may have things to say before the join is done (the scheduler
    // refused it at once): they are said after 'joined', and not at all if the join fails.
    let pending: MemberEvent[] | undefined = [];
    const memberFor = (store: MemberStore): SwarmMember =>
      new SwarmMember({
        model: hex,
        map,
        manifestBytes,
        store,
        origin,
        schedulerUrl: this.options.schedulerUrl,
        ...(this.options.access === undefined ? {} : { access: this.options.access }),
        identity: {
          name: `${this.name}/${hex.slice(0, 12)}`,
          url: this.url,
          uploadBytesPerSecond: this.options.uploadBytesPerSecond ?? RATE_UNKNOWN,
          downloadBytesPerSecond: this.options.downloadBytesPerSecond ?? RATE_UNKNOWN,
          ...(this.options.zone === undefined ? {} : { zone: this.options.zone }),
          ...(this.options.rack === undefined ? {} : { rack: this.options.rack }),
        },
        downloadThrottle: this.downloadThrottle,
        ...(this.options.peerWire === undefined ? {} : { peerWire: this.options.peerWire }),
        ...(this.options.downloadsMax === undefined ? {} : { downloadsMax: this.options.downloadsMax }),
        recentBudget: this.recentBudget,
        peers: keptPeers,
        onPeers: (peers) => peersKeeper.keep(peers),
        onEvent: (event) => {
          if (event.type === 'failed' && options.store === undefined) recordStopped(modelDir, job, event);
          if (pending === undefined) this.options.onEvent?.({ model: hex, ...event });
          else pending.push(event);
        },
      });
    const earlyStore = fresh ? new OpeningStore(opening) : undefined;
    const early = earlyStore === undefined ? undefined : memberFor(earlyStore);
    if (early !== undefined && earlyStore !== undefined) {
      this.opening.set(hex, { map, member: early, store: earlyStore });
      early.start();
      startRootsCheck();
    }
    const [opened, written] = await Promise.allSettled([opening, jobFiles]).finally(() =>
      this.opening.delete(hex),
    );
    if (opened.status === 'rejected' || written.status === 'rejected') {
      await Promise.allSettled([
        early?.close(),
        origin.close(),
        opened.status === 'fulfilled' ? opened.value.close() : undefined,
      ]);
      if (madeModelDir) await rm(modelDir, { recursive: true, force: true });
      const reason: unknown =
        opened.status === 'rejected' ? opened.reason : (written as PromiseRejectedResult).reason;
      throw to !== undefined && !isWeightcastError(reason)
        ? new WeightcastError(
            'IO',
            `cannot write the model into ${to}: ${(reason as Error).message}`,
            { file: to },
            { cause: reason },
          )
        : reason;
    }
    const store = opened.value;
    if (this.closing) {
      // The agent closed while this join was opening its store: nothing may keep running.
      await Promise.allSettled([early?.close(), origin.close(), store.close()]);
      throw new WeightcastError('ABORTED', 'the agent closed while joining');
    }
    const member = early ?? memberFor(store);
    const entry: Joined = {
      hex,
      to,
      map,
      store,
      origin,
      member,
      uploadsFromMemory: 0,
      uploadsFromDisk: 0,
      localPiecesFromMemory: 0,
    };
    this.joined.set(hex, entry);
    if (early === undefined) member.start();
    startRootsCheck();
    rootsCheck?.catch((error: unknown) =>
      member.stopWith(
        isWeightcastError(error) ? error : new WeightcastError('MANIFEST_INVALID', (error as Error).message),
      ),
    );
    this.options.onEvent?.({ type: 'joined', model: hex, pieces: map.pieceCount, held: store.heldCount });
    const said = pending;
    pending = undefined;
    for (const event of said) this.options.onEvent?.({ model: hex, ...event });
    return entry;
  }

  /**
   * `to` if it lies under one of the destination roots (compared after resolving symbolic links in
   * the part of it that exists), else FORBIDDEN: the local API must not let any local process make
   * this agent write wherever the agent's user may.
   */
  private async allowedDestination(to: string): Promise<string> {
    const roots = await Promise.all(
      (this.options.destinationRoots ?? []).map((root) => realpath(root).catch(() => undefined)),
    );
    let existing = resolve(to);
    let rest = '';
    for (let depth = 0; depth < 64; depth++) {
      const real = await realpath(existing).catch(() => undefined);
      if (real !== undefined) {
        const target = join(real, rest);
        if (roots.some((root) => root !== undefined && (target === root || target.startsWith(root + sep))))
          return to;
        break;
      }
      rest = join(basename(existing), rest);
      existing = dirname(existing);
    }
    throw new WeightcastError(
      'FORBIDDEN',
      roots.length === 0
        ? 'this agent was started without --destination-root, so it writes into no destination'
        : `${to} is not under this agent's --destination-root`,
      { file: to },
    );
  }

  private async resumeAll(): Promise<void> {
    const names = await readdir(this.options.cacheDir).catch(() => [] as string[]);
    for (const name of names) {
      if (!/^[0-9a-f]{64}$/.test(name)) continue;
      const dir = join(this.options.cacheDir, name);
      try {
        const job = savedJobSchema.check(JSON.parse(await readFile(join(dir, 'job.json'), 'utf8')), ['job']);
        if (job.stopped !== undefined) {
          // Resuming would only fail again the same way (and ask the origin again at every start);
          // the pieces it verified stay, for the pull that asks for the model next.
          this.options.onEvent?.({
            type: 'not-resumed',
            model: name,
            code: job.stopped.code,
            reason: job.stopped.message,
          });
          continue;
        }
        const manifestPath = join(dir, 'manifest.json');
        const manifest = parseManifest(await readFile(manifestPath), manifestPath);
        if (manifestDigest(manifest) !== `sha256:${name}`)
          throw new Error('manifest does not match its folder');
        await this.join({ source: job.source, manifest, ...(job.to === undefined ? {} : { to: job.to }) });
      } catch (error) {
        this.options.onEvent?.({ type: 'resume-failed', model: name, reason: (error as Error).message });
      }
    }
  }

  /**
   * Runs the request paths once while idle (HTTP client and server, JSON, schema checks), so the
   * first model's first transfers do not pay for compiling them: measured, a cold agent started
   * moving bytes about half a second later than a warm one on a busy 2-core host.
   */
  private async warmUp(): Promise<void> {
    // A connection to the scheduler, opened while the links are quiet, waits in the keep-alive pool
    // for the first registration. The scheduler often shares a busy link with the origin, where each
    // round trip queues behind the model's bytes: on the fan-out at 100 Mbit/s, registrations took
    // 0.08-0.14 s after the join, the connection's handshake one of their two round trips.
    const scheduler = this.options.schedulerUrl.replace(/\/+$/, '');
    void callJson(`${scheduler}/healthz`, 'the scheduler', {
      timeoutMs: 5000,
      access: this.options.access,
    }).catch(() => undefined);
    await callJson(`${this.url}/healthz`, 'this agent', {
      timeoutMs: 5000,
      access: this.options.access,
    }).catch(() => undefined);
    parseMessage(syncReplySchema, { assignments: [], cancellations: [], peers: [] }, 'warm-up');
  }

  private async loadName(): Promise<string> {
    const path = join(this.options.cacheDir, 'agent.json');
    try {
      const saved = savedNameSchema.check(JSON.parse(await readFile(path, 'utf8')), ['agent']);
      return saved.name;
    } catch {
      const name = `${hostname()}-${randomBytes(4).toString('hex')}`;
      await writeFile(path, JSON.stringify({ name }) + '\n');
      return name;
    }
  }

  // ---- HTTP ------------------------------------------------------------------------------------

  private async listen(): Promise<void> {
    assertListenAllowed(
      this.options.host ?? '127.0.0.1',
      this.options.credentials ?? {},
      this.options.insecure === true,
      'the agent',
    );
    const congestion = congestionSetterFor(
      this.options.tcpCongestion ?? TCP_CONGESTION_DEFAULT,
      (wanted, reason) => this.options.onEvent?.({ type: 'tcp-congestion-kept', wanted, reason }),
    );
    this.server = this.httpServer(this.options.tls);
    // Set before the connection's first byte, on what peers connect to (not the local API's server).
    if (congestion !== undefined) this.server.on('connection', (socket: Socket) => congestion.apply(socket));
    // Peers reach the peer wire on the port they know (the loopback server is for the local API).
    this.server.on('upgrade', (req: IncomingMessage, socket: Socket, head: Buffer) => {
      if (new URL(req.url ?? '/', 'http://agent').pathname === PEER_WIRE_PATH && PeerWireServer.wants(req)) {
        this.peerWire.accept(socket, head);
        return;
      }
      socket.on('error', () => undefined);
      socket.end('HTTP/1.1 404 Not Found\r\nconnection: close\r\ncontent-length: 0\r\n\r\n');
    });
    await listenOn(this.server, this.options.host ?? '127.0.0.1', this.options.port ?? 0);
    const address = this.server.address() as AddressInfo;
    if (
      this.options.advertiseUrl === undefined &&
      (address.address === '0.0.0.0' || address.address === '::')
    ) {
      this.server.close();
      throw new WeightcastError(
        'USAGE',
        `listening on every address (${address.address}) needs --advertise URL: peers cannot reach ${address.address}`,
      );
    }
    const host = address.family === 'IPv6' ? `[${address.address}]` : address.address;
    this.url = this.options.advertiseUrl ?? `${schemeOf(this.options.tls)}://${host}:${address.port}`;
    if (!isLoopbackAddress(address.address)) await this.listenOnLoopback(address.port);
  }

  private httpServer(tls?: ServerTls): Server {
    // A request must arrive whole within the timeout (a slow body holds a connection and its buffer).
    const requestTimeoutMs = this.options.requestTimeoutMs ?? REQUEST_TIMEOUT_MS;
    this.limits ??= resolveLimits(
      { requestTimeoutMs, ...this.options.limits },
      { headersTimeoutMs: 30_000, keepAliveTimeoutMs: 30_000 },
    );
    return createLimitedServer(
      this.limits,
      (req, res) => {
        this.handle(req, res).catch((error: unknown) => {
          if (res.headersSent) res.destroy();
          else sendError(res, error);
        });
      },
      { create: (options, listener) => createServiceServer(tls, options, listener) },
    );
  }

  /**
   * The local API on 127.0.0.1 at the agent's port, so `weightcast pull` on this host finds the
   * agent without a flag. A port taken there (another agent) only loses that convenience. Plain
   * HTTP even when the main port has TLS: loopback traffic does not leave the machine, and a pull
   * finds its agent with no certificate to trust.
   */
  private async listenOnLoopback(port: number): Promise<void> {
    const server = this.httpServer();
    try {
      await listenOn(server, '127.0.0.1', port);
      this.loopbackServer = server;
    } catch (error) {
      this.options.onEvent?.({ type: 'loopback-unavailable', reason: (error as Error).message });
    }
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? '/', 'http://agent');
    const parts = url.pathname.split('/').filter((part) => part.length > 0);
    if (url.pathname === '/healthz') return sendJson(res, 200, { ok: true, name: this.name });
    if (parts[0] !== 'v1') return notFound(req, res);
    if (parts[1] === 'seed' && this.options.seedRoutes) {
      return this.options.seedRoutes(req, res, this.gate.authorize(req, 'member'));
    }
    if (parts[1] === 'models' && parts[2] !== undefined) {
      this.gate.authorize(req, 'member');
      const hex = parseMessage(modelHex, parts[2], 'model name');
      if ((req.method === 'GET' || req.method === 'HEAD') && parts[3] === 'files' && parts.length > 4) {
        return this.serveFile(hex, decodePath(parts.slice(4).join('/')), req, res, 'peer');
      }
      if (req.method === 'GET' && parts[3] === 'have' && parts.length === 4) {
        const entry = this.model(hex);
        const flowing = entry.member.ringFlowing();
        const parent = entry.member.ringFeedParent;
        return sendJson(res, 200, {
          pieceCount: entry.map.pieceCount,
          have: encodeBitfield(entry.map.pieceCount, (piece) => entry.store.has(piece)),
          // In ring mode, what a chain member whose feed ended chooses its new parent by.
          ...(flowing === undefined
            ? {}
            : {
                ring: {
                  pushing: this.peerWire.subscribers(hex) > 0,
                  flowing,
                  held: entry.store.heldCount,
                  head: entry.member.ringReadsForChain,
                  ...(parent === undefined ? {} : { parent }),
                },
              }),
        });
      }
      return notFound(req, res);
    }
    if (parts[1] === 'local') {
      if (!isSameHost(req.socket)) {
        return sendJson(res, 403, { code: 'FORBIDDEN', message: 'the local API answers only this machine' });
      }
      const forged = crossSiteReason(req);
      if (forged !== undefined) return sendJson(res, 403, { code: 'FORBIDDEN', message: forged });
      return this.handleLocal(req, res, parts.slice(2), url.searchParams);
    }
    return notFound(req, res);
  }

  private async writeThrottled(res: ServerResponse, buffer: Buffer): Promise<void> {
    const chunk = this.uploadThrottle.limited ? UPLOAD_CHUNK_BYTES : buffer.length;
    for (let offset = 0; offset < buffer.length; offset += chunk) {
      if (res.destroyed) throw new WeightcastError('ABORTED', 'the peer hung up');
      const part = buffer.subarray(offset, Math.min(buffer.length, offset + chunk));
      await this.uploadThrottle.take(part.length);
      if (!res.write(part)) {
        await new Promise<void>((resolve) => {
          const done = (): void => {
            res.off('drain', done);
            res.off('close', done);
            resolve();
          };
          res.on('drain', done);
          res.on('close', done);
        });
      }
    }
  }

  private async handleLocal(
    req: IncomingMessage,
    res: ServerResponse,
    parts: string[],
    query: URLSearchParams,
  ): Promise<void> {
    if (parts[0] !== 'models') return notFound(req, res);
    if (req.method === 'POST' && parts.length === 1) {
      const body = parseMessage(joinSchema, await readJsonBody(req), 'join request');
      // The roots are checked by the join, after its first requests (JoinOptions.merkleRootsUnchecked).
      const manifest = parseManifest(body.manifest, JOIN_MANIFEST, { merkleRoots: 'skip' });
      const status = await this.join({
        source: body.source,
        manifest,
        merkleRootsUnchecked: true,
        ...(body.token === undefined ? {} : { token: body.token }),
        ...(body.to === undefined ? {} : { to: body.to }),
      });
      return sendJson(res, 200, status);
    }
    const hex = parseMessage(modelHex, parts[1] ?? '', 'model name');
    if (req.method === 'GET' && parts.length === 2) {
      const waitMs = parseWaitMs(query.get('waitCompleteMs'));
      if (waitMs > 0) await this.waitComplete(hex, waitMs, res);
      return sendJson(res, 200, this.status(hex));
    }
    if ((req.method === 'GET' || req.method === 'HEAD') && parts[2] === 'files' && parts.length > 3) {
      return this.serveFile(hex, decodePath(parts.slice(3).join('/')), req, res, 'local');
    }
    return notFound(req, res);
  }

  /**
   * Serves a byte range of a model file. For a local reader it waits for (and hurries) the pieces
   * under the range; for a peer it answers only ranges held verified, within one piece's size, under
   * the upload slots and cap.
   */
  private async serveFile(
    hex: string,
    path: string,
    req: IncomingMessage,
    res: ServerResponse,
    mode: 'local' | 'peer',
  ): Promise<void> {
    const entry = this.model(hex);
    const fileIndex = entry.map.manifest.files.findIndex((file) => file.path === path);
    const file = entry.map.manifest.files[fileIndex];
    if (file === undefined) throw new WeightcastError('ORIGIN_NOT_FOUND', `model ${hex} has no file ${path}`);
    const range = parseRange(req.headers.range, file.size);
    if (range === 'invalid') {
      res.writeHead(416, { 'content-range': `bytes */${file.size}` }).end();
      return;
    }
    const { start, end } = range ?? { start: 0, end: file.size };
    const pieces = entry.map.piecesOfRange(fileIndex, start, end);
    if (mode === 'peer') {
      const most = Math.max(entry.map.pieceSize, ASSIGNMENT_BYTES_MAX);
      if (end - start > most) {
        throw new WeightcastError('LIMIT_EXCEEDED', `peers read at most ${most} bytes at once`);
      }
      if (!pieces.every((piece) => entry.store.has(piece))) {
        throw new WeightcastError(
          'SWARM_PIECE_NOT_HELD',
          `bytes ${start}-${end - 1} of ${path} are not all held here`,
        );
      }
    }
    const headers: Record<string, string | number> = {
      'content-type': 'application/octet-stream',
      'content-length': end - start,
      'accept-ranges': 'bytes',
    };
    if (range !== undefined) headers['content-range'] = `bytes ${start}-${end - 1}/${file.size}`;
    if (req.method === 'HEAD') {
      res.writeHead(range === undefined ? 200 : 206, headers).end();
      return;
    }
    if (mode === 'peer') return this.uploadRange(entry, fileIndex, start, end, res, headers);
    if (this.localReads >= LOCAL_READS_MAX)
      throw new WeightcastError('SWARM_BUSY', 'too many local reads at once');
    this.localReads++;
    const abort = new AbortController();
    res.on('close', () => abort.abort());
    try {
      entry.member.urgent(pieces.filter((piece) => !entry.store.has(piece)));
      res.writeHead(range === undefined ? 200 : 206, headers);
      const pieceSize = entry.map.pieceSize;
      let position = start;
      for (const piece of pieces) {
        await entry.store.whenHeld(piece, abort.signal);
        const pieceEnd = Math.min(end, (Math.floor(position / pieceSize) + 1) * pieceSize);
        // A piece that just arrived (a lazy load waits for the pieces it reads) is still in memory.
        const borrowed = recentRange(entry, fileIndex, position, pieceEnd - position);
        if (borrowed !== undefined) {
          entry.localPiecesFromMemory++;
          const taken = await writeDone(res, borrowed.bytes);
          borrowed.release(taken);
          if (!taken) return;
        } else {
          const buffer = Buffer.allocUnsafe(pieceEnd - position);
          await entry.store.readFileRange(fileIndex, position, buffer);
          if (!res.write(buffer)) await new Promise<void>((resolve) => res.once('drain', resolve));
        }
        position = pieceEnd;
      }
      res.end();
    } finally {
      this.localReads--;
    }
  }

  /** Sends verified bytes to a peer from a pooled buffer, under the upload slots and cap. */
  private async uploadRange(
    entry: Joined,
    fileIndex: number,
    start: number,
    end: number,
    res: ServerResponse,
    headers: Record<string, string | number>,
  ): Promise<void> {
    if (!this.uploads.tryAcquire()) {
      throw new WeightcastError('SWARM_BUSY', `all ${this.uploads.slotsMax} upload slots are busy`);
    }
    const borrowed =
      this.options.corruptUploads === true ? undefined : recentRange(entry, fileIndex, start, end - start);
    if (borrowed !== undefined) {
      entry.uploadsFromMemory++;
      let sent = false;
      try {
        res.writeHead(206, headers);
        await this.writeThrottled(res, borrowed.bytes);
        await new Promise<void>((resolve) => res.end(resolve));
        sent = true;
      } finally {
        this.uploads.release();
        borrowed.release(sent);
      }
      return;
    }
    const pooled = this.uploads.take(end - start, entry.map.pieceSize);
    let reusable = false;
    try {
      const buffer = pooled.subarray(0, end - start);
      entry.uploadsFromDisk++;
      await entry.store.readFileRange(fileIndex, start, buffer);
      if (this.options.corruptUploads === true && buffer.length > 0) {
        buffer[buffer.length >> 1] = (buffer[buffer.length >> 1] ?? 0) ^ 0xff;
      }
      res.writeHead(206, headers);
      await this.writeThrottled(res, buffer);
      await new Promise<void>((resolve) => res.end(resolve));
      reusable = true;
    } finally {
      this.uploads.release();
      // A buffer whose response did not finish may still be referenced by the socket.
      if (reusable) this.uploads.giveBack(pooled);
    }
  }

  /**
   * A joined model as the peer wire serves it: verified pieces only. One whose store is still
   * opening (Agent.opening) is served too: it holds nothing yet, but a ring child can subscribe, and
   * is pushed each piece as it is verified once the store is open.
   */
  private servedModel(hex: string): ServedModel | undefined {
    const source = this.joined.get(hex) ?? this.opening.get(hex);
    if (source === undefined) return undefined;
    const { map, member, store } = source;
    /** The joined entry: a piece is held only once the store is open, so it exists when one is read. */
    const joined = (): Joined => this.model(hex);
    return {
      pieceCount: map.pieceCount,
      pieceSize: map.pieceSize,
      has: (piece) => store.has(piece),
      piecesUnder: (piece, offset, length) => {
        const where = map.locate(piece);
        const start = where.offset + offset;
        if (start + length > where.file.size) return undefined;
        return map.piecesOfRange(where.fileIndex, start, start + length);
      },
      read: async (piece, offset, target) => {
        const where = map.locate(piece);
        const entry = joined();
        entry.uploadsFromDisk++;
        await entry.store.readFileRange(where.fileIndex, where.offset + offset, target);
      },
      borrow: (piece, offset, length) => {
        const borrowed = member.recentPieces.borrow(piece, offset, length);
        const entry = this.joined.get(hex);
        if (borrowed !== undefined && entry !== undefined) entry.uploadsFromMemory++;
        return borrowed;
      },
      ring: {
        heldBitfield: () => member.heldBitfield(),
        watchVerified: (listener) => member.watchVerified(listener),
        watchArriving: (listener) => member.watchArriving(listener),
        pieceLength: (piece) => map.pieceLength(piece),
      },
    };
  }
}

/** Bytes [start, start + length) of a file from the member's recent pieces, if one kept run holds them. */
function recentRange(entry: Joined, fileIndex: number, start: number, length: number): Borrowed | undefined {
  const { pieceSize } = entry.map;
  const piece = entry.map.globalIndex(fileIndex, Math.floor(start / pieceSize));
  return entry.member.recentPieces.borrow(piece, start % pieceSize, length);
}

/**
 * One agent per cache: two would append to the same journals and write the same partial files. The
 * lock holds the agent's PID; one left by a killed agent is taken over.
 */
async function lockCache(cacheDir: string): Promise<() => Promise<void>> {
  const path = join(cacheDir, CACHE_LOCK_FILE);
  const inUse = (owner: number): WeightcastError =>
    new WeightcastError(
      'AGENT_CACHE_IN_USE',
      `another agent (PID ${owner}) uses the cache ${cacheDir}: stop it, or give this one another --cache`,
      { file: path },
    );
  try {
    return await takePidLock(path, inUse);
  } catch (error) {
    if (isWeightcastError(error)) throw error;
    throw new WeightcastError(
      'IO',
      `cannot lock the cache ${cacheDir}: ${(error as Error).message}`,
      { file: path },
      { cause: error },
    );
  }
}

/** The lock file in an agent's cache directory. */
export const CACHE_LOCK_FILE = 'agent.lock';

/** `?waitCompleteMs=N` on a status request: how long it may wait for completion (0: answer now). */
function parseWaitMs(value: string | null): number {
  if (value === null) return 0;
  const ms = Number(value);
  if (!Number.isInteger(ms) || ms < 0 || ms > LOCAL_STATUS_WAIT_MS_MAX) {
    throw new WeightcastError(
      'USAGE',
      `waitCompleteMs must be an integer from 0 to ${LOCAL_STATUS_WAIT_MS_MAX}, got ${value}`,
    );
  }
  return ms;
}

function notFound(req: IncomingMessage, res: ServerResponse): void {
  sendJson(res, 404, { code: 'NOT_FOUND', message: `no route ${req.method ?? ''} ${req.url ?? ''}` });
}

/**
 * Why a request to the local API may come from a web page rather than a process of this machine,
 * or undefined. A page can make a browser send requests to 127.0.0.1, but it cannot choose their
 * Host (a DNS name it controls, rebound to 127.0.0.1, shows as that name), hide its Origin, or send
 * a JSON body without a preflight this API never answers.
 */
function crossSiteReason(req: IncomingMessage): string | undefined {
  const host = req.headers.host ?? '';
  if (!isLocalHostHeader(host, req.socket.localAddress ?? '')) {
    return `the local API answers only requests addressed to this machine (Host: ${host.slice(0, 100)})`;
  }
  const origin = req.headers.origin;
  if (origin !== undefined) {
    let originHost = '';
    try {
      originHost = new URL(origin).host;
    } catch {
      originHost = '';
    }
    if (!isLocalHostHeader(originHost, req.socket.localAddress ?? '')) {
      return `the local API refuses requests from web pages (Origin: ${origin.slice(0, 100)})`;
    }
  }
  if (req.method === 'POST' && !/^application\/json\b/i.test(req.headers['content-type'] ?? '')) {
    return 'the local API takes JSON bodies only (Content-Type: application/json)';
  }
  return undefined;
}

/** A Host (or Origin host) that names this machine: loopback, localhost, or our own address. */
function isLocalHostHeader(host: string, localAddress: string): boolean {
  const name = host
    .replace(/:\d+$/, '')
    .replace(/^\[(.*)\]$/, '$1')
    .toLowerCase();
  if (name === 'localhost' || isLoopbackAddress(name)) return true;
  return name !== '' && name === localAddress.replace(/^::ffff:/, '');
}

/** A URL path's percent-encoding decoded; malformed encoding is the client's error, not ours. */
function decodePath(path: string): string {
  try {
    return decodeURIComponent(path);
  } catch {
    throw new WeightcastError('USAGE', `malformed percent-encoding in ${path.slice(0, 200)}`);
  }
}

function isLoopbackAddress(address: string): boolean {
  return address === '::1' || address.startsWith('127.') || address.startsWith('::ffff:127.');
}

/** The local API is for processes on this machine: loopback, or a connection to our own address. */
function isSameHost(socket: Socket): boolean {
  const remote = socket.remoteAddress ?? '';
  if (remote === '127.0.0.1' || remote === '::1' || remote.startsWith('::ffff:127.')) return true;
  return remote !== '' && remote === socket.localAddress;
}

function parseRange(
  header: string | undefined,
  size: number,
): { start: number; end: number } | undefined | 'invalid' {
  if (header === undefined) return undefined;
  const match = /^bytes=(\d*)-(\d*)$/.exec(header.trim());
  if (match === null) return 'invalid';
  const [, first = '', last = ''] = match;
  if (first === '' && last === '') return 'invalid';
  if (first === '') {
    const suffix = Number(last);
    return suffix === 0 ? 'invalid' : { start: Math.max(0, size - suffix), end: size };
  }
  const start = Number(first);
  const end = last === '' ? size : Math.min(size, Number(last) + 1);
  if (start >= size || end <= start) return 'invalid';
  return { start, end };
}

/**
 * Marks a model's job as stopped for good, so a restarted agent does not resume it (a join rewrites
 * the job). Synchronous, so a join that follows at once writes its job after this; a file that cannot
 * be written (the disk that stopped the model is full) is removed instead, which also keeps the
 * model from being resumed.
 */
function recordStopped(
  modelDir: string,
  job: { source: string; to?: string },
  failure: { code: string; reason: string },
): void {
  const path = join(modelDir, 'job.json');
  try {
    writeFileSync(
      path,
      JSON.stringify({ ...job, stopped: { code: failure.code, message: failure.reason.slice(0, 4096) } }) +
        '\n',
    );
  } catch {
    try {
      unlinkSync(path);
    } catch {
      // Nothing left to do: the next start says it could not resume the model.
    }
  }
}

/** What a join request's manifest is called in its errors. */
const JOIN_MANIFEST = 'the join request manifest';

/** Hashes per turn of the event loop while a join checks its roots: ~3 ms each. */
const ROOT_HASHES_PER_TURN = 2048;

/** The manifest's Merkle roots, spread over turns of the event loop (JoinOptions.merkleRootsUnchecked). */
async function checkRootsInTurns(manifest: Manifest): Promise<void> {
  const turn = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));
  for (const file of manifest.files) {
    await turn();
    const steps = checkMerkleRootSteps(JOIN_MANIFEST, file, ROOT_HASHES_PER_TURN);
    while (steps.next().done !== true) await turn();
  }
}

function withManifestCheck(check: Promise<void> | undefined, options: PieceStoreOptions): PieceStoreOptions {
  return check === undefined ? options : { ...options, manifestCheck: check };
}
