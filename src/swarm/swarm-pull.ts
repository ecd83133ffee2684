/**
 * Pulling a model through the swarm, two ways:
 *  - `swarmPull`: in-process. The pull becomes a swarm host of its own for the duration (a piece
 *    server on `listen`, a member talking to the scheduler) and writes straight into the destination:
 *    pieces land in `DIR/.weightcast/swarm/partial/`, each file moves to its final name once every
 *    piece of it is verified, and an interrupted pull resumes from its journal.
 *  - `agentPull`: through the agent running on this machine. The agent joins the swarm (and keeps
 *    seeding after the pull ends) with the destination as the model's home: a model it does not
 *    hold yet is written straight into the destination, verified piece by piece, and nothing is
 *    copied afterwards. A model it already holds elsewhere is placed from there: from its own cache
 *    by reflink, hard link (`link`) or kernel copy, without a second hash; from another pull's
 *    destination (which its user may have changed since) by the ordinary verified pull, as is any
 *    model whose files this process cannot read or the agent cannot write where asked.
 */

import { isAbsolute, join, resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { WeightcastError, abortError, isWeightcastError } from '../errors.js';
import { encodeManifest, manifestDigest, type Manifest } from '../manifest/manifest.js';
import { access, constants } from 'node:fs/promises';
import { HttpOrigin } from '../origin/http.js';
import { LocalOrigin } from '../origin/local.js';
import type { Origin } from '../origin/origin.js';
import { placeFiles, someFilesPresent, type PlaceResult } from '../pull/place.js';
import { pull, STATE_DIR_NAME, type PullEvent, type PullResult } from '../pull/pull.js';
import { Agent, type AgentEvent, type ModelStatus } from './agent/agent.js';
import { callJson, remoteError } from './wire/http-json.js';
import { errorBodySchema } from './wire/protocol.js';
import { z } from 'zod';

export interface SwarmPullOptions {
  manifest: Manifest;
  schedulerUrl: string;
  /** Where this pull's piece server listens; default 127.0.0.1, any port. */
  host?: string;
  port?: number;
  advertiseUrl?: string;
  uploadBytesPerSecond?: number;
  downloadBytesPerSecond?: number;
  token?: string;
  signal?: AbortSignal;
  onEvent?: (event: AgentEvent) => void;
  onProgress?: (status: ModelStatus) => void;
}

export interface SwarmPullResult {
  manifestDigest: string;
  bytesTotal: number;
  originBytes: number;
  peerBytes: number;
  corruptPieces: number;
  piecesReused: number;
}

export async function swarmPull(
  source: string,
  dest: string,
  options: SwarmPullOptions,
): Promise<SwarmPullResult> {
  const stateDir = join(dest, STATE_DIR_NAME, 'swarm');
  const agent = await Agent.start({
    schedulerUrl: options.schedulerUrl,
    cacheDir: stateDir,
    resume: false,
    ...(options.host === undefined ? {} : { host: options.host }),
    ...(options.port === undefined ? {} : { port: options.port }),
    ...(options.advertiseUrl === undefined ? {} : { advertiseUrl: options.advertiseUrl }),
    ...(options.uploadBytesPerSecond === undefined
      ? {}
      : { uploadBytesPerSecond: options.uploadBytesPerSecond }),
    ...(options.downloadBytesPerSecond === undefined
      ? {}
      : { downloadBytesPerSecond: options.downloadBytesPerSecond }),
    ...(options.onEvent === undefined ? {} : { onEvent: options.onEvent }),
  });
  try {
    const joined = await agent.join({
      source,
      manifest: options.manifest,
      store: { dataDir: join(stateDir, 'partial'), stateDir, finalDir: dest },
      ...(options.token === undefined ? {} : { token: options.token }),
    });
    const hex = joined.model;
    await waitFor(
      () => agent.status(hex),
      () => agent.whenComplete(hex),
      options,
    );
    const status = agent.status(hex);
    return {
      manifestDigest: `sha256:${hex}`,
      bytesTotal: status.totalBytes,
      originBytes: status.originBytes,
      peerBytes: status.peerBytes,
      corruptPieces: status.corruptPieces,
      piecesReused: joined.held,
    };
  } finally {
    await agent.close();
  }
}

async function waitFor(
  status: () => ModelStatus,
  complete: () => Promise<void>,
  options: { signal?: AbortSignal; onProgress?: (status: ModelStatus) => void },
): Promise<void> {
  let done = false;
  let failure: Error | undefined;
  const finished = complete().then(
    () => {
      done = true;
    },
    (error: unknown) => {
      failure = error instanceof Error ? error : new Error(String(error));
      done = true;
    },
  );
  while (!done) {
    if (options.signal?.aborted === true) throw abortError(options.signal, 'the swarm pull');
    options.onProgress?.(status());
    await Promise.race([
      finished,
      sleep(250, undefined, options.signal ? { signal: options.signal } : {}),
    ]).catch(() => undefined);
  }
  if (failure !== undefined) throw failure;
  options.onProgress?.(status());
}

export interface AgentPullOptions {
  manifest: Manifest;
  agentUrl: string;
  token?: string;
  signal?: AbortSignal;
  onProgress?: (status: ModelStatus) => void;
  /** The agent holds the whole model, verified; the copy out starts now. */
  onAgentComplete?: (status: ModelStatus) => void;
  onPullEvent?: (event: PullEvent) => void;
  /** Placing from the agent's cache: `link` hard-links where it can; default: reflink or copy. */
  place?: 'copy' | 'link';
  /** The agent could not write into the destination itself; the pull copies the files out instead. */
  onDestinationRefused?: (reason: string) => void;
}

/** How the files reached the destination. */
export type AgentPlacement =
  { how: 'direct' } | { how: 'placed'; result: PlaceResult } | { how: 'verified-copy'; result: PullResult };

/** How often a pull through an agent hears of its progress while the agent fills the model. */
const PROGRESS_PERIOD_MS = 500;

const statusSchema = z.object({
  model: z.string(),
  pieceCount: z.number(),
  held: z.number(),
  heldBytes: z.number(),
  complete: z.boolean(),
  totalBytes: z.number(),
  originBytes: z.number(),
  peerBytes: z.number(),
  corruptPieces: z.number(),
  duplicateBytes: z.number(),
  registered: z.boolean(),
  filesDir: z.string().max(4096).optional(),
  filesAt: z.enum(['cache', 'destination']).optional(),
  failed: errorBodySchema.optional(),
});

export async function agentPull(
  source: string,
  dest: string,
  options: AgentPullOptions,
): Promise<{ status: ModelStatus; placement: AgentPlacement }> {
  const base = options.agentUrl.replace(/\/+$/, '');
  const hex = manifestDigest(options.manifest).slice('sha256:'.length);
  const to = resolve(dest);
  const call = async (path: string, method: 'GET' | 'POST', body?: unknown): Promise<ModelStatus> => {
    const raw = await callJson(`${base}${path}`, 'the agent', {
      method,
      timeoutMs: 30_000,
      ...(body === undefined ? {} : { body }),
      ...(options.signal === undefined ? {} : { signal: options.signal }),
    });
    const parsed = statusSchema.safeParse(raw);
    if (!parsed.success)
      throw new WeightcastError('SWARM_PROTOCOL', `the agent at ${base} sent a malformed status`);
    const { filesDir, filesAt, failed, ...status } = parsed.data;
    // The model stopped at the agent (its disk could not take it): the pull fails with that error.
    if (failed !== undefined) throw remoteError(failed, `the agent at ${base}`);
    return {
      ...status,
      ...(filesDir === undefined ? {} : { filesDir }),
      ...(filesAt === undefined ? {} : { filesAt }),
    };
  };
  const join = (withDestination: boolean): Promise<ModelStatus> =>
    call('/v1/local/models', 'POST', {
      // The agent runs elsewhere in the file system's eyes: a path source must not be relative.
      source: isPathSource(source) ? resolve(source) : source,
      manifest: encodeManifest(options.manifest).toString('utf8'),
      ...(options.token === undefined ? {} : { token: options.token }),
      ...(withDestination ? { to } : {}),
    });
  try {
    await join(true);
  } catch (error) {
    // An agent that may not write into the destination (another user's, or read-only to it) can
    // still fetch the model into its cache; the copy out happens here, as this process's user.
    if (!isWeightcastError(error) || error.code !== 'IO') throw error;
    options.onDestinationRefused?.(error.message);
    await join(false);
  }
  // Each status request waits at the agent until the model is complete, or for one progress period.
  let status = await call(`/v1/local/models/${hex}`, 'GET');
  for (;;) {
    options.onProgress?.(status);
    if (status.complete) break;
    if (options.signal?.aborted === true) throw abortError(options.signal, 'waiting for the agent');
    status = await call(`/v1/local/models/${hex}?waitCompleteMs=${PROGRESS_PERIOD_MS}`, 'GET');
  }
  options.onAgentComplete?.(status);
  if (status.filesDir !== undefined && resolve(status.filesDir) === to)
    return { status, placement: { how: 'direct' } };
  // The agent's verified files are on this machine: its own cache is placed without reading it;
  // anything else is read from disk when this process can (verified against the manifest) and
  // through the local API otherwise.
  const local = status.filesDir !== undefined && (await readable(status.filesDir));
  // Files already in the destination (a pull run again) are checked by the verified pull, which
  // keeps those that match and fetches the rest.
  if (
    local &&
    status.filesAt === 'cache' &&
    status.filesDir !== undefined &&
    !(await someFilesPresent(to, options.manifest))
  ) {
    const result = await placeFiles(status.filesDir, to, options.manifest, {
      mode: options.place ?? 'copy',
      ...(options.signal === undefined ? {} : { signal: options.signal }),
    });
    return { status, placement: { how: 'placed', result } };
  }
  const origin: Origin =
    local && status.filesDir !== undefined
      ? new LocalOrigin(status.filesDir)
      : new HttpOrigin(`${base}/v1/local/models/${hex}/files/`, {
          files: options.manifest.files.map((file) => ({ path: file.path, size: file.size })),
        });
  try {
    const result = await pull(origin, dest, {
      manifest: options.manifest,
      ...(options.signal === undefined ? {} : { signal: options.signal }),
      ...(options.onPullEvent === undefined ? {} : { onEvent: options.onPullEvent }),
    });
    return { status, placement: { how: 'verified-copy', result } };
  } finally {
    await origin.close();
  }
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
