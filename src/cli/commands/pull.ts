/**
 * `weightcast pull SRC --to DIR`: which pull this is, and the pulls through the swarm. The pull from
 * the origin itself is in pull-origin.ts; each route imports only what it runs, since on a host
 * with an agent the pull process is one of many started at once.
 */

import type { AccessFlags } from '../../auth/credentials.js';
import { WeightcastError, asInputFileError } from '../../errors.js';
import { access, constants, open } from 'node:fs/promises';
import { countOf, formatBytes, formatSeconds, parseMbps } from '../../util/units.js';
import { reportError, type CliIo } from '../io.js';
import { corruptPieceText, createProgress, originRetryReporter } from '../progress.js';
import { serviceUrlFlag } from './service-url.js';
import { checkDirectoryFlag } from './directory-flag.js';
import type { AgentPlacement } from '../../swarm/agent-pull.js';
import { findLocalAgent } from '../../swarm/local-agent.js';
import { AGENT_PORT_DEFAULT } from '../../swarm/agent/defaults.js';

export interface PullFlags extends AccessFlags {
  to: string;
  manifest?: string;
  digest?: string;
  concurrency?: string;
  memoryMb: string;
  pieceSize?: string;
  token?: string;
  originRetryS?: string;
  json?: boolean;
  scheduler?: string;
  /** A URL; false with --no-agent. */
  agent?: string | false;
  link?: boolean;
  listen?: string;
  advertise?: string;
  uploadMbps?: string;
  downloadMbps?: string;
  seeds?: string;
  /** false with --no-direct-io. */
  directIo?: boolean;
}

/**
 * Which pull this is: in-process swarm (--scheduler), seed tier (--seeds), through an agent (--agent,
 * or the agent found on this machine), or straight from the origin. A pull with a manifest goes
 * through a local agent when one is running, as dfget goes through dfdaemon; without a manifest it
 * cannot (peers are trusted only for bytes a manifest names) and says so.
 */
export async function runPull(src: string, flags: PullFlags, io: CliIo): Promise<number> {
  try {
    await checkDirectoryFlag(flags.to, '--to');
    // A digest is checked against a manifest file; without one the manifest is made from the
    // origin as the bytes arrive, and the digest would only be known once the files are in place.
    if (flags.digest !== undefined && flags.manifest === undefined)
      throw new WeightcastError(
        'USAGE',
        '--digest checks the manifest given with --manifest: give the manifest file too',
      );
    // A manifest path that names nothing is said before anything else (finding an agent, the origin).
    if (flags.manifest !== undefined) await checkReadable(flags.manifest);
  } catch (error) {
    return reportError(io, error, flags.json === true);
  }
  if (flags.scheduler !== undefined || typeof flags.agent === 'string')
    return swarmPullCommand(src, flags, io);
  if (flags.agent === false || flags.seeds !== undefined) return pullFromOrigin(src, flags, io);
  let found;
  try {
    found = await findLocalAgent(process.env, io.signal);
  } catch (error) {
    return reportError(io, error, flags.json === true);
  }
  if (!found.found) {
    // Said only where an agent could have been used: a user who expected one learns it was not found.
    if (found.reason === 'none-listening' && flags.manifest !== undefined && flags.json !== true)
      io.stderr(
        `weightcast: no agent answers at http://127.0.0.1:${AGENT_PORT_DEFAULT} on this host; pulling from the origin directly (--agent URL or $WEIGHTCAST_AGENT for one elsewhere)\n`,
      );
    return pullFromOrigin(src, flags, io);
  }
  if (flags.manifest === undefined) {
    io.stderr(
      `weightcast: an agent is running at ${found.url}, but going through it needs --manifest (peers are trusted only for bytes a manifest names); pulling from the origin directly\n`,
    );
    return pullFromOrigin(src, flags, io);
  }
  if (flags.json !== true) {
    const how = found.via === 'env' ? '$WEIGHTCAST_AGENT' : 'found on this host';
    io.stderr(`weightcast: pulling through the agent at ${found.url} (${how}; --no-agent to skip it)\n`);
  }
  return swarmPullCommand(src, { ...flags, agent: found.url }, io);
}

async function pullFromOrigin(src: string, flags: PullFlags, io: CliIo): Promise<number> {
  const { pullCommand } = await import('./pull-origin.js');
  return pullCommand(src, flags, io);
}

/** One word for how a pull through an agent got its files to the destination (JSON `placed`). */
function describePlacement(placement: AgentPlacement): string {
  if (placement.how === 'direct') return 'direct';
  if (placement.how === 'verified-copy') return 'verified-copy';
  const { methods } = placement.result;
  // The weakest method that placed any file names the whole: one copied file means it was copied.
  return methods.copy > 0 ? 'copy' : methods.link > 0 ? 'link' : 'reflink';
}

/** Files placed from the agent's cache: no byte of them was read, so none was hashed again. */
function isPlacedFromCache(placed: unknown): boolean {
  return placed === 'reflink' || placed === 'link' || placed === 'copy';
}

/** How the files got to the destination; for files placed from the cache, how to check them. */
function placementLine(summary: Record<string, unknown>, flags: PullFlags): string {
  const placed = summary['placed'];
  const unhashed = `; not hashed again: weightcast verify ${flags.to} --manifest ${flags.manifest ?? 'M'} checks them`;
  switch (placed) {
    case 'direct':
      return 'the agent wrote the files here directly (no copy)';
    case 'reflink':
      return `placed from the agent's cache by reflink (shared blocks, copy-on-write; no copy)${unhashed}`;
    case 'link':
      return `hard-linked from the agent's cache (the files are the agent's too: do not modify them)${unhashed}`;
    case 'copy':
      return `copied from the agent's cache by the kernel (no reflinks on this file system)${unhashed}`;
    default: {
      const fromOrigin = Number(summary['piecesFromOrigin'] ?? 0);
      return (
        "copied from the agent's files (or kept where already correct here), every piece verified again" +
        (fromOrigin > 0
          ? `; ${fromOrigin} ${fromOrigin === 1 ? 'piece' : 'pieces'} that changed there from the origin`
          : '')
      );
    }
  }
}

/** USAGE (or IO) unless the manifest file can be opened for reading. */
async function checkReadable(path: string): Promise<void> {
  try {
    await access(path, constants.R_OK);
  } catch (error) {
    throw asInputFileError(error, 'the manifest', path);
  }
}

/** A manifest file's bytes, as the agent is given them (it parses them; this process need not). */
async function readManifestFile(path: string, signal: AbortSignal | undefined): Promise<Buffer> {
  try {
    const handle = await open(path, 'r');
    try {
      const { size } = await handle.stat();
      if (size > MANIFEST_FILE_BYTES_MAX)
        throw new WeightcastError('MANIFEST_TOO_LARGE', `${path} is over ${MANIFEST_FILE_BYTES_MAX} bytes`, {
          file: path,
        });
      return await handle.readFile(signal === undefined ? {} : { signal });
    } finally {
      await handle.close();
    }
  } catch (error) {
    throw asInputFileError(error, 'the manifest', path);
  }
}

function parseListen(text: string): { host: string; port: number } {
  const match = /^(.*):(\d+)$/.exec(text);
  const port = match === null ? NaN : Number(match[2]);
  if (match === null || !Number.isInteger(port) || port > 65535 || (match[1] ?? '') === '') {
    throw new WeightcastError('USAGE', `--listen must look like HOST:PORT, got ${text}`);
  }
  return { host: (match[1] as string).replace(/^\[(.*)\]$/, '$1'), port };
}

/** Larger than any manifest the agent's join accepts (its JSON body limit). */
const MANIFEST_FILE_BYTES_MAX = 64 * 1024 * 1024;

/** `pull --scheduler` (in-process swarm host) and `pull --agent` (through the local agent). */
async function swarmPullCommand(src: string, flags: PullFlags, io: CliIo): Promise<number> {
  const json = flags.json === true;
  const progress = createProgress(io, 'pulling', json);
  try {
    if (flags.scheduler !== undefined && typeof flags.agent === 'string') {
      throw new WeightcastError('USAGE', 'give --scheduler or --agent, not both');
    }
    if (flags.scheduler !== undefined) serviceUrlFlag(flags.scheduler, '--scheduler', 'http://10.0.0.1:7000');
    if (typeof flags.agent === 'string') serviceUrlFlag(flags.agent, '--agent', 'http://127.0.0.1:7100');
    if (flags.manifest === undefined) {
      throw new WeightcastError(
        'SWARM_NEEDS_MANIFEST',
        'a swarm pull needs --manifest: peers are only trusted for bytes that match it',
      );
    }
    const manifestPath = flags.manifest;
    const { resolveAccess } = await import('../../auth/credentials.js');
    const access = await resolveAccess(flags);
    const token = flags.token ?? process.env['WEIGHTCAST_TOKEN'] ?? process.env['HF_TOKEN'];
    const started = performance.now();
    let firstStatus = true;
    const onProgress = (status: { held: number; pieceCount: number; totalBytes: number }): void => {
      const done =
        status.pieceCount === 0
          ? status.totalBytes
          : Math.round((status.totalBytes * status.held) / status.pieceCount);
      // The first status comes before any transfer: what it holds was verified before this pull.
      if (firstStatus) progress.startFrom(done);
      firstStatus = false;
      progress.update(done, status.totalBytes);
    };
    let summary: Record<string, unknown>;
    let fileCount: number;
    if (flags.scheduler !== undefined) {
      const { loadManifest } = await import('../../manifest/manifest.js');
      const manifest = await loadManifest(manifestPath, {
        signal: io.signal,
        ...(flags.digest !== undefined ? { expectDigest: flags.digest } : {}),
      });
      fileCount = manifest.files.length;
      const listen = parseListen(flags.listen ?? '127.0.0.1:0');
      const upload = parseMbps(flags.uploadMbps, '--upload-mbps');
      const download = parseMbps(flags.downloadMbps, '--download-mbps');
      const { swarmPull } = await import('../../swarm/swarm-pull.js');
      const originRetry = originRetryReporter((line) => progress.log(`weightcast: ${line}`));
      const result = await swarmPull(src, flags.to, {
        manifest,
        schedulerUrl: flags.scheduler,
        host: listen.host,
        port: listen.port,
        signal: io.signal,
        onProgress,
        onEvent: (event) => {
          if (event.type === 'scheduler-lost')
            progress.log(
              `weightcast: no scheduler (${event.reason}); carrying on with known peers until it answers`,
            );
          if (event.type === 'origin-retry') originRetry(event);
          if (event.type === 'piece' && event.outcome === 'corrupt')
            progress.log(`weightcast: ${corruptPieceText(event)}; fetching it again`);
        },
        ...(flags.advertise === undefined ? {} : { advertiseUrl: flags.advertise }),
        ...(upload === undefined ? {} : { uploadBytesPerSecond: upload }),
        ...(download === undefined ? {} : { downloadBytesPerSecond: download }),
        ...(token === undefined || token === '' ? {} : { token }),
        ...(flags.directIo === false ? { directIo: false } : {}),
        credentials: access.credentials,
        access: access.client,
        ...(access.serverTls === undefined ? {} : { tls: access.serverTls }),
        insecure: access.insecure,
        ...(flags.originRetryS === undefined
          ? {}
          : { originRetryBudgetMs: (await import('./shared.js')).originRetryBudgetMs(flags.originRetryS) }),
      });
      summary = { ...result };
    } else {
      const { agentPull } = await import('../../swarm/agent-pull.js');
      const { status, placement } = await agentPull(src, flags.to, {
        manifestBytes: await readManifestFile(manifestPath, io.signal),
        manifestName: manifestPath,
        ...(flags.digest !== undefined ? { expectDigest: flags.digest } : {}),
        agentUrl: flags.agent as string,
        access: access.client,
        signal: io.signal,
        onProgress,
        // A bar on a terminal redraws often; JSON and plain lines come once a second at most.
        progressPeriodMs: io.stderrIsTTY && !json ? 500 : 1000,
        ...(flags.link === true ? { place: 'link' as const } : {}),
        onAgentComplete: (status) => {
          const seconds = (performance.now() - started) / 1000;
          if (json) io.stdout(JSON.stringify({ event: 'agent-complete', seconds }) + '\n');
          else if (status.filesAt !== 'destination' || status.filesDir === undefined)
            progress.log(`weightcast: the agent holds the verified model after ${formatSeconds(seconds)}`);
        },
        onAgentCopyChanged: (dir, where) =>
          progress.log(
            `weightcast: the agent's copy at ${dir} has changed since the agent verified it (${where} does not match the manifest); fetching what it gets wrong from the origin`,
          ),
        onWaitingForAgent: (waitMs) =>
          progress.log(
            `weightcast: the agent at ${flags.agent as string} does not answer yet (still starting?); waiting up to ${waitMs / 1000} s for it`,
          ),
        onDestinationRefused: (reason) =>
          progress.log(
            `weightcast: the agent cannot write into ${flags.to} (${reason}); it fetches into its cache, and this pull copies the files out`,
          ),
        ...(token === undefined || token === '' ? {} : { token }),
      });
      fileCount = status.fileCount;
      summary = {
        manifestDigest: `sha256:${status.model}`,
        bytesTotal: status.totalBytes,
        originBytes: status.originBytes,
        peerBytes: status.peerBytes,
        corruptPieces: status.corruptPieces,
        placed: describePlacement(placement),
        ...(placement.how === 'verified-copy' ? { piecesFromOrigin: placement.changedPieces } : {}),
      };
    }
    progress.finish();
    const seconds = (performance.now() - started) / 1000;
    if (json)
      io.stdout(JSON.stringify({ event: 'done', verified: true, seconds, to: flags.to, ...summary }) + '\n');
    else {
      io.stdout(
        `pulled ${countOf(fileCount, 'file')}, ${formatBytes(Number(summary['bytesTotal']))} into ${flags.to} in ${formatSeconds(seconds)} through the swarm\n` +
          `${formatBytes(Number(summary['originBytes']))} from the origin, ${formatBytes(Number(summary['peerBytes']))} from peers` +
          (typeof flags.agent === 'string' ? ' (by the agent)' : '') +
          // Placing from the cache reads no byte: the check to claim is the agent's, as it fetched them.
          (isPlacedFromCache(summary['placed'])
            ? '; the agent verified every piece against the manifest as it fetched it\n'
            : '; every piece verified against the manifest\n') +
          (summary['placed'] === undefined ? '' : `${placementLine(summary, flags)}\n`) +
          `model ${String(summary['manifestDigest'])}\n`,
      );
    }
    return 0;
  } catch (error) {
    progress.finish();
    return reportError(io, error, json);
  }
}
