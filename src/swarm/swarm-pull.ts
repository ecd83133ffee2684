/**
 * `pull --scheduler`: a pull through the swarm in-process. The pull becomes a swarm host of its own
 * for the duration (a piece server on `listen`, a member talking to the scheduler) and writes
 * straight into the destination: pieces land in `DIR/.weightcast/swarm/partial/`, each file moves
 * to its final name once every piece of it is verified, and an interrupted pull resumes from its
 * journal. One pull at a time writes into a destination, this kind or a pull from the origin
 * (pull/destination.ts). (Through the agent of this machine instead: agent-pull.ts.)
 */

import { rm } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { ServiceCredentials } from '../auth/gate.js';
import type { ServerTls, ServiceAccess } from '../auth/transport.js';
import { abortError } from '../errors.js';
import { isNoRoom } from '../util/free-space.js';
import type { Manifest } from '../manifest/manifest.js';
import { STATE_DIR_NAME, lockDestination } from '../pull/destination.js';
import { Agent, type AgentEvent, type ModelStatus } from './agent/agent.js';

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
  /** Write with O_DIRECT where the file system allows it (AgentOptions.directIo). Default true. */
  directIo?: boolean;
  /** How long an origin read waits out an outage (AgentOptions.originRetryBudgetMs). */
  originRetryBudgetMs?: number;
  /** Who may read pieces from this pull while it runs (the cluster token); see AgentOptions. */
  credentials?: ServiceCredentials;
  /** What this pull sends to the scheduler and its peers. */
  access?: ServiceAccess;
  /** Serve peers with HTTPS. */
  tls?: ServerTls;
  /** Serve peers on a non-loopback address without credentials. */
  insecure?: boolean;
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
  // The lock of a pull from the origin too: one pull at a time into `dest`, of either kind.
  const unlock = await lockDestination(dest);
  try {
    return await swarmPullLocked(source, dest, options);
  } finally {
    await unlock();
  }
}

async function swarmPullLocked(
  source: string,
  dest: string,
  options: SwarmPullOptions,
): Promise<SwarmPullResult> {
  const stateDir = join(dest, STATE_DIR_NAME, 'swarm');
  const agent = await Agent.start({
    schedulerUrl: options.schedulerUrl,
    cacheDir: stateDir,
    resume: false,
    ...(options.directIo === false ? { directIo: false } : {}),
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
    ...(options.originRetryBudgetMs === undefined
      ? {}
      : { originRetryBudgetMs: options.originRetryBudgetMs }),
    ...(options.credentials === undefined ? {} : { credentials: options.credentials }),
    ...(options.access === undefined ? {} : { access: options.access }),
    ...(options.tls === undefined ? {} : { tls: options.tls }),
    ...(options.insecure === undefined ? {} : { insecure: options.insecure }),
  });
  /** Refused for want of room before anything was written: its state folder goes too. */
  let refusedForSpace = false;
  try {
    const joined = await agent.join({
      source,
      manifest: options.manifest,
      store: {
        dataDir: join(stateDir, 'partial'),
        stateDir,
        finalDir: dest,
        checkSpace: true,
        inlineWrites: true,
      },
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
  } catch (error) {
    refusedForSpace = isNoRoom(error);
    throw error;
  } finally {
    await agent.close();
    if (refusedForSpace) await rm(stateDir, { recursive: true, force: true });
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
