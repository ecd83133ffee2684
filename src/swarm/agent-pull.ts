/**
 * `pull` through the agent of this machine. The agent joins the swarm (and keeps seeding after the
 * pull ends) with the destination as the model's home: a model it does not hold yet is written
 * straight into the destination, verified piece by piece, and nothing is copied afterwards. A
 * model it already holds elsewhere is placed from there: from its own cache by reflink, hard link
 * (`link`) or kernel copy, without a second hash; from another pull's destination (which its user
 * may have changed since) by the ordinary verified pull, as is any model whose files this process
 * cannot read or the agent cannot write where asked; a piece the agent's copy gets wrong there
 * comes from the model's origin.
 *
 * One pull at a time writes into a destination, whichever way it goes (pull/destination.ts): this
 * process holds the destination's lock for as long as it runs, and the agent writes there for it.
 *
 * This module is what a pull process runs on a host with an agent, so it stays light to load: the
 * placing and the verified copy are imported only when a pull needs them.
 */

import { createHash } from 'node:crypto';
import { access, constants } from 'node:fs/promises';
import { connect } from 'node:net';
import { isAbsolute, resolve } from 'node:path';
import { WeightcastError, isWeightcastError } from '../errors.js';
import { lockDestination } from '../pull/destination.js';
import type { Manifest } from '../manifest/manifest.js';
import type { Origin } from '../origin/origin.js';
import type { PlaceResult } from '../pull/place.js';
import type { PullEvent, PullResult } from '../pull/pull.js';
import type { ModelStatus } from './agent/agent.js';
import type { ServiceAccess } from '../auth/transport.js';
import { callJson, remoteError } from './wire/http-json.js';

export interface AgentPullOptions {
  /**
   * The manifest as the user gave it. The agent parses and checks it; this process parses it only
   * when it has files to place or copy itself, or when the join fails (to name the file).
   */
  manifestBytes: Buffer;
  /** Where the manifest came from, for messages. */
  manifestName: string;
  /** Refuse the manifest unless its digest is this (`sha256:<hex>` or the hex). */
  expectDigest?: string;
  agentUrl: string;
  /** TLS settings for an agent whose port has TLS (`--agent https://...`); the local API needs no token. */
  access?: ServiceAccess;
  token?: string;
  signal?: AbortSignal;
  onProgress?: (status: ModelStatus) => void;
  /** The agent holds the whole model, verified. */
  onAgentComplete?: (status: ModelStatus) => void;
  onPullEvent?: (event: PullEvent) => void;
  /** Placing from the agent's cache: `link` hard-links where it can; default: reflink or copy. */
  place?: 'copy' | 'link';
  /**
   * The agent's copy (at `dir`) no longer matches the manifest where `where` says (the first such
   * piece): it changed after the agent verified it, and the pieces it gets wrong come from the origin.
   */
  onAgentCopyChanged?: (dir: string, where: string) => void;
  /** The agent could not write into the destination itself; the pull copies the files out instead. */
  onDestinationRefused?: (reason: string) => void;
  /** How long to keep asking an agent that refuses connections (still starting). Default 10 s. */
  agentStartWaitMs?: number;
  /** The agent has refused connections for AGENT_START_NOTICE_MS; the pull waits up to `waitMs` in all. */
  onWaitingForAgent?: (waitMs: number) => void;
  /**
   * How often to hear of the agent's progress while it fills the model (each is a status request
   * that waits at the agent for completion up to this long). Default PROGRESS_PERIOD_MS.
   */
  progressPeriodMs?: number;
}

/** How the files reached the destination. */
export type AgentPlacement =
  | { how: 'direct' }
  | { how: 'placed'; result: PlaceResult }
  /** `changedPieces`: pieces the agent's copy got wrong, fetched from the origin instead. */
  | { how: 'verified-copy'; result: PullResult; changedPieces: number };

/**
 * How long a pull waits for an agent that does not answer yet: one started at the same moment (a
 * node's boot, a job that starts both) takes a few hundred ms to listen.
 */
const AGENT_START_WAIT_MS = 10_000;
/**
 * While an agent may still be starting (the first AGENT_START_QUICK_MS of the wait), the pull looks
 * again every AGENT_START_QUICK_RETRY_MS, so it joins within that of the agent's listening; past
 * that, an agent that is not there yet is looked for every AGENT_START_SLOW_RETRY_MS until the wait
 * is over. Looking is a bare TCP connection (`accepting`): refused, it costs ~0.1 ms of CPU, a
 * refused join request ~0.5 ms, and sixteen processes may be starting on a few cores.
 *
 * Measured (`bench/agent-start.js --join pull-launch`, a pull started with its agent): first piece
 * 165-170 ms from the launch with the doubling delays before (50 ms up to 500), 142-152 ms with these.
 */
const AGENT_START_QUICK_MS = 2_000;
/** After this long without an agent, the pull says it is waiting for one (`onWaitingForAgent`). */
const AGENT_START_NOTICE_MS = 1_000;
const AGENT_START_QUICK_RETRY_MS = 20;
const AGENT_START_SLOW_RETRY_MS = 250;

/** How long to wait before looking for a still-silent agent again, `waitedMs` after the first attempt. */
export function agentStartRetryDelayMs(waitedMs: number): number {
  return waitedMs < AGENT_START_QUICK_MS ? AGENT_START_QUICK_RETRY_MS : AGENT_START_SLOW_RETRY_MS;
}

/**
 * Runs `call` again once the agent at `url` accepts connections, while it does not answer (connection
 * refused: it is still starting), up to `waitMs`; any answer, or any other error, ends the wait.
 */
async function whileAgentStarts<T>(
  call: () => Promise<T>,
  url: string,
  waitMs: number,
  signal: AbortSignal | undefined,
  onWaiting: ((waitMs: number) => void) | undefined,
): Promise<T> {
  const started = performance.now();
  let told = false;
  for (;;) {
    try {
      return await call();
    } catch (error) {
      if (!isWeightcastError(error, 'SCHEDULER_UNREACHABLE')) throw error;
      for (;;) {
        const waited = performance.now() - started;
        const delay = agentStartRetryDelayMs(waited);
        if (waited + delay > waitMs || signal?.aborted === true) throw error;
        if (!told && waited >= AGENT_START_NOTICE_MS) {
          told = true;
          onWaiting?.(waitMs);
        }
        await new Promise((resolve) => setTimeout(resolve, delay));
        if (await accepting(url, AGENT_START_SLOW_RETRY_MS)) break;
      }
    }
  }
}

/**
 * Whether something accepts TCP connections at `url`'s host and port now. Anything but a refusal
 * (accepted, unreachable, timed out after `timeoutMs`) counts as yes: the request then says what it is.
 */
export function accepting(url: string, timeoutMs: number): Promise<boolean> {
  const { hostname, port, protocol } = new URL(url);
  return new Promise((resolve) => {
    const socket = connect({
      host: hostname.replace(/^\[|\]$/g, ''),
      port: Number(port === '' ? (protocol === 'https:' ? 443 : 80) : port),
      timeout: timeoutMs,
    });
    const settle = (open: boolean): void => {
      socket.destroy();
      resolve(open);
    };
    socket.once('connect', () => settle(true));
    socket.once('timeout', () => settle(true));
    socket.once('error', (error: NodeJS.ErrnoException) => settle(error.code !== 'ECONNREFUSED'));
  });
}

/** How often a pull through an agent hears of its progress while the agent fills the model. */
export const PROGRESS_PERIOD_MS = 500;

export async function agentPull(
  source: string,
  dest: string,
  options: AgentPullOptions,
): Promise<{ status: ModelStatus; placement: AgentPlacement }> {
  let parsed: Manifest | undefined;
  const manifest = async (): Promise<Manifest> => {
    const { parseManifest } = await import('../manifest/manifest.js');
    parsed ??= parseManifest(options.manifestBytes, options.manifestName);
    return parsed;
  };
  await checkDigest(options, manifest);
  // The lock every pull takes (pull/destination.ts), where the others take it: once the user's
  // input is checked, before the source (here the agent) is asked anything. The agent then writes
  // into the destination on this process's behalf, beside the lock, until the pull ends.
  const unlock = await lockDestination(dest);
  try {
    return await pullThroughAgent(source, dest, options, manifest);
  } finally {
    await unlock();
  }
}

/** MANIFEST_DIGEST_MISMATCH unless the manifest's digest is the one asked for (`expectDigest`). */
async function checkDigest(options: AgentPullOptions, manifest: () => Promise<Manifest>): Promise<void> {
  const expected = options.expectDigest?.replace(/^sha256:/, '');
  if (expected === undefined) return;
  // A manifest file is its canonical encoding, so its SHA-256 is the model's digest; a file that is
  // not (reformatted by hand) is parsed here to learn its digest before anything is asked of the agent.
  if (createHash('sha256').update(options.manifestBytes).digest('hex') === expected) return;
  const { manifestDigest } = await import('../manifest/manifest.js');
  const hex = manifestDigest(await manifest()).slice('sha256:'.length);
  if (hex !== expected) {
    throw new WeightcastError(
      'MANIFEST_DIGEST_MISMATCH',
      `${options.manifestName}: digest is sha256:${hex}, expected sha256:${expected}`,
      { file: options.manifestName },
    );
  }
}

/** The pull once its destination is locked: the agent's join, its progress, the files placed. */
async function pullThroughAgent(
  source: string,
  dest: string,
  options: AgentPullOptions,
  manifest: () => Promise<Manifest>,
): Promise<{ status: ModelStatus; placement: AgentPlacement }> {
  const base = options.agentUrl.replace(/\/+$/, '');
  const to = resolve(dest);
  const call = async (path: string, method: 'GET' | 'POST', body?: unknown): Promise<ModelStatus> =>
    checkStatus(
      await callJson(`${base}${path}`, 'the agent', {
        method,
        timeoutMs: 30_000,
        access: options.access,
        ...(body === undefined ? {} : { body }),
        ...(options.signal === undefined ? {} : { signal: options.signal }),
      }),
      base,
    );
  const join = (withDestination: boolean): Promise<ModelStatus> =>
    call('/v1/local/models', 'POST', {
      // The agent runs elsewhere in the file system's eyes: a path source must not be relative.
      source: isPathSource(source) ? resolve(source) : source,
      manifest: options.manifestBytes.toString('utf8'),
      ...(options.token === undefined ? {} : { token: options.token }),
      ...(withDestination ? { to } : {}),
    });
  // Interrupted while the agent fetches: the agent goes on (it keeps and seeds the model), so the
  // same command run again finds it further along or done.
  const interrupted = (): WeightcastError =>
    new WeightcastError(
      'ABORTED',
      `interrupted; the agent at ${base} goes on fetching the model: run the same command again for the files`,
    );
  /** What a failed call to the agent tells the user: `when` is "did not answer" or "stopped answering". */
  const agentGone = (error: unknown, when: string): Error => {
    if (options.signal?.aborted === true) return interrupted();
    // Something answered at the URL, but not as an agent does.
    if (isWeightcastError(error, 'SWARM_PROTOCOL') && error.details['foreign'] === true) {
      return new WeightcastError(
        'SWARM_PROTOCOL',
        `${base} does not answer as a weightcast agent (${error.message}); --agent takes an agent's URL (its port is 7100 unless it was started with --port)`,
        { agent: base },
        { cause: error },
      );
    }
    // Not running, or gone mid-pull (a crash, a restart): what it verified stays in its cache, so
    // running the pull again resumes.
    if (isWeightcastError(error, 'SCHEDULER_UNREACHABLE')) {
      return new WeightcastError(
        'AGENT_UNREACHABLE',
        `the agent at ${base} ${when} (${error.message}); run the pull again once it is back, or with --no-agent to pull from the origin`,
        { agent: base },
        { cause: error },
      );
    }
    return error instanceof Error ? error : new Error(String(error));
  };
  let joined: ModelStatus;
  /** Whether the agent took the destination as the model's home (else files come out of its cache). */
  let intoDestination = true;
  try {
    joined = await whileAgentStarts(
      () => join(true),
      base,
      options.agentStartWaitMs ?? AGENT_START_WAIT_MS,
      options.signal,
      options.onWaitingForAgent,
    );
  } catch (error) {
    // The agent names what it refuses as its join request's; a manifest that is not valid is
    // reported as a pull without an agent reports it, naming the file (exit 2), so a failed join is
    // first checked here with the same parse. A join that succeeds costs this process no parse
    // (0.02 s of CPU for a 70 GB model in 16 MiB pieces, 0.26 s for 1 TB).
    await manifest();
    // An agent that may not write into the destination (outside its --destination-root, another
    // user's, read-only to it) still fetches the model into its cache; this process, as its own
    // user, places the files from there.
    if (!isWeightcastError(error) || (error.code !== 'IO' && error.code !== 'FORBIDDEN'))
      throw agentGone(error, 'did not answer');
    // The refusal is the agent's own sentence; callJson put "the agent: " before it.
    options.onDestinationRefused?.(error.message.replace(/^the agent: /, ''));
    intoDestination = false;
    joined = await join(false).catch((failure: unknown) =>
      Promise.reject(agentGone(failure, 'did not answer')),
    );
  }
  // The agent's digest is the model's name (it differs from the file's hash only for a manifest
  // file that is not canonical).
  const hex = joined.model;
  // Files that will come out of the agent's cache (or another place it holds the model) need room
  // in the destination: a destination without it is refused now, not once the agent holds the
  // model (the agent goes on fetching it). Files the agent writes there, its own store checks.
  if (!intoDestination || (joined.filesDir !== undefined && resolve(joined.filesDir) !== to)) {
    const { checkPlaceSpace } = await import('../pull/place.js');
    await checkPlaceSpace(joined.filesDir, to, await manifest()).catch((error: unknown) => {
      throw isWeightcastError(error, 'IO')
        ? new WeightcastError(
            'IO',
            `${error.message} (the agent at ${base} ${joined.complete ? 'holds the model' : 'goes on fetching the model into its cache'})`,
            error.details,
            { cause: error },
          )
        : error;
    });
  }
  // Each status request waits at the agent until the model is complete, or for one progress period.
  let status = joined;
  for (;;) {
    options.onProgress?.(status);
    if (status.complete) break;
    if (options.signal?.aborted === true) throw interrupted();
    const periodMs = options.progressPeriodMs ?? PROGRESS_PERIOD_MS;
    status = await call(`/v1/local/models/${hex}?waitCompleteMs=${periodMs}`, 'GET').catch((error: unknown) =>
      Promise.reject(agentGone(error, 'stopped answering')),
    );
  }
  options.onAgentComplete?.(status);
  if (status.filesDir !== undefined && resolve(status.filesDir) === to)
    return { status, placement: { how: 'direct' } };
  // The agent's verified files are on this machine: its own cache is placed without reading it;
  // anything else is read from disk when this process can (verified against the manifest) and
  // through the local API otherwise.
  //
  // Placing without hashing again is deliberate: the cache is the agent's own directory, written
  // only with pieces it verified, and hashing the placed copy would read the whole model once more,
  // the cost this placement exists to avoid. What it cannot see is a cache changed behind the
  // agent's back (its user editing a file, a hard-linked copy edited, a disk fault), and a cheap
  // check (sizes, times) would not see a disk fault either; so the pull says what was checked
  // (the agent's verification as it fetched the pieces) and how to check the copy (`verify`).
  const local = status.filesDir !== undefined && (await readable(status.filesDir));
  // Files already in the destination (a pull run again) are checked by the verified pull, which
  // keeps those that match and fetches the rest.
  const { placeFiles, someFilesPresent } = await import('../pull/place.js');
  if (
    local &&
    status.filesAt === 'cache' &&
    status.filesDir !== undefined &&
    !(await someFilesPresent(to, await manifest()))
  ) {
    const result = await placeFiles(status.filesDir, to, await manifest(), {
      mode: options.place ?? 'copy',
      ...(options.signal === undefined ? {} : { signal: options.signal }),
    });
    return { status, placement: { how: 'placed', result } };
  }
  const [{ pullLocked }, { LocalOrigin }, { HttpOrigin }, { openOrigin }] = await Promise.all([
    import('../pull/pull.js'),
    import('../origin/local.js'),
    import('../origin/http.js'),
    import('../origin/open.js'),
  ]);
  const files = (await manifest()).files;
  const entries = files.map((file) => ({ path: file.path, size: file.size }));
  // The agent verified these files as it wrote them, but a pull's destination is its user's, who
  // may have changed them since (so may a disk): a piece they get wrong comes from the model's
  // origin instead, and the user hears once that the agent's copy changed.
  const fallback = openOrigin(source, {
    files: entries,
    tls: options.access?.tls,
    ...(options.token === undefined ? {} : { token: options.token }),
  });
  const origin: Origin =
    local && status.filesDir !== undefined
      ? new LocalOrigin(status.filesDir)
      : new HttpOrigin(`${base}/v1/local/models/${hex}/files/`, { files: entries, tls: options.access?.tls });
  let changedPieces = 0;
  try {
    // This process holds the destination's lock already.
    const result = await pullLocked(origin, dest, {
      manifest: await manifest(),
      fallbackOrigin: fallback,
      ...(options.signal === undefined ? {} : { signal: options.signal }),
      onEvent: (event) => {
        if (event.type === 'piece-rejected' && event.origin === origin.location) {
          if (changedPieces === 0)
            options.onAgentCopyChanged?.(status.filesDir ?? base, `${event.path} piece ${event.piece}`);
          changedPieces++;
        }
        options.onPullEvent?.(event);
      },
    });
    return { status, placement: { how: 'verified-copy', result, changedPieces } };
  } finally {
    await Promise.all([origin.close(), fallback.close()]);
  }
}

/**
 * An agent's status answer, checked field by field (this module stays free of the schema library,
 * which costs a pull process more to load than the rest of it). A model the agent had to stop (its
 * disk could not take it) fails the pull with the agent's error.
 */
function checkStatus(raw: unknown, base: string): ModelStatus {
  const malformed = (): WeightcastError =>
    new WeightcastError('SWARM_PROTOCOL', `the agent at ${base} sent a malformed status`);
  if (typeof raw !== 'object' || raw === null) throw malformed();
  const value = raw as Record<string, unknown>;
  const numbers = [
    'pieceCount',
    'held',
    'heldBytes',
    'totalBytes',
    'originBytes',
    'peerBytes',
    'corruptPieces',
    'duplicateBytes',
    'fileCount',
  ] as const;
  if (typeof value['model'] !== 'string' || !/^[0-9a-f]{64}$/.test(value['model'])) throw malformed();
  for (const key of numbers)
    if (typeof value[key] !== 'number' || !Number.isFinite(value[key])) throw malformed();
  if (typeof value['complete'] !== 'boolean' || typeof value['registered'] !== 'boolean') throw malformed();
  const failed = value['failed'] as { code?: unknown; message?: unknown } | null | undefined;
  if (failed !== undefined) {
    const code = failed?.code;
    const message = failed?.message;
    if (typeof code !== 'string' || typeof message !== 'string') throw malformed();
    throw remoteError({ code, message }, `the agent at ${base}`);
  }
  const filesDir = value['filesDir'];
  const filesAt = value['filesAt'];
  if (filesDir !== undefined && (typeof filesDir !== 'string' || filesDir.length > 4096)) throw malformed();
  if (filesAt !== undefined && filesAt !== 'cache' && filesAt !== 'destination') throw malformed();
  const number = (key: (typeof numbers)[number]): number => value[key] as number;
  return {
    model: value['model'],
    fileCount: number('fileCount'),
    pieceCount: number('pieceCount'),
    held: number('held'),
    heldBytes: number('heldBytes'),
    complete: value['complete'],
    totalBytes: number('totalBytes'),
    originBytes: number('originBytes'),
    peerBytes: number('peerBytes'),
    corruptPieces: number('corruptPieces'),
    duplicateBytes: number('duplicateBytes'),
    registered: value['registered'],
    ...(filesDir === undefined ? {} : { filesDir }),
    ...(filesAt === undefined ? {} : { filesAt }),
  };
}

/** A source that names a directory of this machine rather than a URL. */
function isPathSource(source: string): boolean {
  return !/^[a-z][a-z0-9+.-]*:/i.test(source) || isAbsolute(source);
}

async function readable(dir: string): Promise<boolean> {
  try {
    await access(dir, constants.R_OK);
    return true;
  } catch {
    return false;
  }
}
