/**
 * Pulling a model through the swarm, two ways:
 *  - `swarmPull`: in-process. The pull becomes a swarm host of its own for the duration (a piece
 *    server on `listen`, a member talking to the scheduler) and writes straight into the destination:
 *    pieces land in `DIR/.weightcast/swarm/partial/`, each file moves to its final name once every
 *    piece of it is verified, and an interrupted pull resumes from its journal.
 *  - `agentPull`: through the agent running on this machine. The agent joins the swarm (and keeps
 *    seeding after the pull ends); once it holds the model, the files are copied out of it with the
 *    ordinary verified pull, reading the agent's local file API as an HTTP origin.
 */

import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { WeightcastError, abortError } from '../errors.js';
import { encodeManifest, manifestDigest, type Manifest } from '../manifest/manifest.js';
import { access, constants } from 'node:fs/promises';
import { HttpOrigin } from '../origin/http.js';
import { LocalOrigin } from '../origin/local.js';
import type { Origin } from '../origin/origin.js';
import { pull, STATE_DIR_NAME, type PullEvent, type PullResult } from '../pull/pull.js';
import { Agent, type AgentEvent, type ModelStatus } from './agent/agent.js';
import { callJson } from './wire/http-json.js';
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
  const finished = complete().then(() => {
    done = true;
  });
  while (!done) {
    if (options.signal?.aborted === true) throw abortError(options.signal, 'the swarm pull');
    options.onProgress?.(status());
    await Promise.race([
      finished,
      sleep(250, undefined, options.signal ? { signal: options.signal } : {}),
    ]).catch(() => undefined);
  }
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
}

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
});

export async function agentPull(
  source: string,
  dest: string,
  options: AgentPullOptions,
): Promise<{ status: ModelStatus; copy: PullResult }> {
  const base = options.agentUrl.replace(/\/+$/, '');
  const hex = manifestDigest(options.manifest).slice('sha256:'.length);
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
    const { filesDir, ...status } = parsed.data;
    return filesDir === undefined ? status : { ...status, filesDir };
  };
  await call('/v1/local/models', 'POST', {
    source,
    manifest: encodeManifest(options.manifest).toString('utf8'),
    ...(options.token === undefined ? {} : { token: options.token }),
  });
  // Each status request waits at the agent until the model is complete, or for one progress period.
  let status = await call(`/v1/local/models/${hex}`, 'GET');
  for (;;) {
    options.onProgress?.(status);
    if (status.complete) break;
    if (options.signal?.aborted === true) throw abortError(options.signal, 'waiting for the agent');
    status = await call(`/v1/local/models/${hex}?waitCompleteMs=${PROGRESS_PERIOD_MS}`, 'GET');
  }
  options.onAgentComplete?.(status);
  // The agent's verified files are on this machine: read them from disk when this process can
  // (the copy is verified against the manifest either way); through the local API otherwise.
  const local = status.filesDir !== undefined && (await readable(status.filesDir));
  const origin: Origin =
    local && status.filesDir !== undefined
      ? new LocalOrigin(status.filesDir)
      : new HttpOrigin(`${base}/v1/local/models/${hex}/files/`, {
          files: options.manifest.files.map((file) => ({ path: file.path, size: file.size })),
        });
  try {
    const copy = await pull(origin, dest, {
      manifest: options.manifest,
      ...(options.signal === undefined ? {} : { signal: options.signal }),
      ...(options.onPullEvent === undefined ? {} : { onEvent: options.onPullEvent }),
    });
    return { status, copy };
  } finally {
    await origin.close();
  }
}

async function readable(dir: string): Promise<boolean> {
  try {
    await access(dir, constants.R_OK);
    return true;
  } catch {
    return false;
  }
}
