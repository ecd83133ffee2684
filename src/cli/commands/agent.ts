/** `weightcast agent --scheduler URL --cache DIR`: runs a swarm agent until Ctrl-C. */

import { resolveAccess, type AccessFlags } from '../../auth/credentials.js';
import type { ServiceAccess } from '../../auth/transport.js';
import { WeightcastError } from '../../errors.js';
import { Agent, type AgentEvent } from '../../swarm/agent/agent.js';
import { parseMbps, parsePositiveInt } from '../../util/units.js';
import { reportError, serveUntilInterrupted, type CliIo } from '../io.js';
import { corruptPieceText, originRetryReporter } from '../progress.js';
import { listenError, originRetryBudgetMs } from './shared.js';
import { serviceUrlFlag } from './service-url.js';
import { checkDirectoryFlag } from './directory-flag.js';
import { serverLimitsFromFlags, type ServerLimitFlags } from '../server-limit-flags.js';
import type { SeedNode } from '../../seed/node/seed-node.js';
import { stat } from 'node:fs/promises';
import { join } from 'node:path';
import type { RetryEvent } from '../../origin/http.js';
import { receiveLowWaterNote } from '../../util/receive-low-water.js';
import { chooseCongestion, kernelCongestion } from '../../util/tcp-congestion.js';

export interface AgentFlags extends AccessFlags, ServerLimitFlags {
  scheduler: string;
  cache: string;
  port: string;
  host: string;
  advertise?: string;
  name?: string;
  zone?: string;
  rack?: string;
  uploadMbps?: string;
  downloadMbps?: string;
  uploads: string;
  recentMb?: string;
  destinationRoot: string[];
  /** false with --no-direct-io. */
  directIo: boolean;
  injectCorruptUploads?: boolean;
  role: string;
  originRetryS?: string;
  tcpCongestion: string;
  injectSeedCorruptStores?: boolean;
  json?: boolean;
}

/** `--recent-mb`: a whole number of MiB, 0 allowed (no pieces kept in memory). */
function parseRecentMb(text: string): number {
  const mib = Number(text);
  if (!/^\d+$/.test(text.trim()) || !Number.isSafeInteger(mib) || mib > 1024 * 1024) {
    throw new WeightcastError('USAGE', `--recent-mb must be a whole number of MiB (0 for none), got ${text}`);
  }
  return mib * 1024 * 1024;
}

export async function agentCommand(flags: AgentFlags, io: CliIo): Promise<number> {
  const json = flags.json === true;
  try {
    const port = Number(flags.port);
    if (!Number.isInteger(port) || port < 0 || port > 65535) {
      throw new WeightcastError('USAGE', `--port must be 0-65535, got ${flags.port}`);
    }
    serviceUrlFlag(flags.scheduler, '--scheduler', 'http://10.0.0.1:7000');
    await checkDirectoryFlag(flags.cache, '--cache');
    if (flags.advertise !== undefined) serviceUrlFlag(flags.advertise, '--advertise', 'http://10.0.0.2:7001');
    // Said before anything is written to the cache (the agent resolves it again at its start).
    chooseCongestion(flags.tcpCongestion, kernelCongestion());
    const upload = parseMbps(flags.uploadMbps, '--upload-mbps');
    const download = parseMbps(flags.downloadMbps, '--download-mbps');
    const access = await resolveAccess(flags);
    const seed = flags.role === 'seed' ? await openSeedNode(flags, upload, access.client) : undefined;
    const agent = await Agent.start({
      credentials: access.credentials,
      access: access.client,
      ...(access.serverTls === undefined ? {} : { tls: access.serverTls }),
      insecure: access.insecure,
      ...(seed === undefined ? {} : { seedRoutes: seed.handle }),
      schedulerUrl: flags.scheduler,
      cacheDir: flags.cache,
      directIo: flags.directIo,
      host: flags.host,
      port,
      uploadsMax: parsePositiveInt(flags.uploads, '--uploads'),
      ...(flags.recentMb === undefined ? {} : { recentBytes: parseRecentMb(flags.recentMb) }),
      destinationRoots: flags.destinationRoot,
      tcpCongestion: flags.tcpCongestion,
      limits: serverLimitsFromFlags(flags),
      ...(flags.originRetryS === undefined
        ? {}
        : { originRetryBudgetMs: originRetryBudgetMs(flags.originRetryS) }),
      ...(flags.advertise === undefined ? {} : { advertiseUrl: flags.advertise }),
      ...(flags.name === undefined ? {} : { name: flags.name }),
      ...(flags.zone === undefined ? {} : { zone: flags.zone }),
      ...(flags.rack === undefined ? {} : { rack: flags.rack }),
      ...(upload === undefined ? {} : { uploadBytesPerSecond: upload }),
      ...(download === undefined ? {} : { downloadBytesPerSecond: download }),
      ...(flags.injectCorruptUploads === true ? { corruptUploads: true } : {}),
      // For comparisons: WEIGHTCAST_PEER_WIRE=0 reads peers over HTTP ranges, as before the peer wire.
      ...(process.env['WEIGHTCAST_PEER_WIRE'] === '0' ? { peerWire: false } : {}),
      onEvent: (event) => printEvent(io, event, json),
    }).catch((error: unknown) => {
      // A --host this machine cannot listen on is a bad flag value, as for the scheduler and serve.
      throw listenError(error, flags.host);
    });
    if (TRACE)
      io.stderr(JSON.stringify({ at: performance.timeOrigin + performance.now(), type: 'listening' }) + '\n');
    await seed?.register(flags.scheduler, agent.name, agent.url, io.signal).catch(async (error: unknown) => {
      await agent.close();
      throw error;
    });
    const note = receiveLowWaterNote();
    if (note !== undefined) io.stderr(`weightcast agent: ${note}\n`);
    for (const root of flags.destinationRoot) {
      const problem = await directoryProblem(root);
      if (problem !== undefined)
        io.stderr(
          `weightcast agent: --destination-root ${root} ${problem}: pulls into it are copied out of the cache until it is a directory\n`,
        );
    }
    await serveUntilInterrupted(io, json, 'agent', { url: agent.url, name: agent.name });
    await agent.close();
    return 0;
  } catch (error) {
    return reportError(io, error, json);
  }
}

/** Why `path` is not a directory this process can see, if it is not. */
async function directoryProblem(path: string): Promise<string | undefined> {
  try {
    return (await stat(path)).isDirectory() ? undefined : 'is not a directory';
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'ENOENT'
      ? 'does not exist'
      : `cannot be read (${(error as Error).message})`;
  }
}

/** `--role seed`: the seed tier's node, whose code a plain agent never loads. */
async function openSeedNode(
  flags: AgentFlags,
  upload: number | undefined,
  access: ServiceAccess,
): Promise<SeedNode> {
  const { SeedNode } = await import('../../seed/node/seed-node.js');
  return SeedNode.open({
    dir: join(flags.cache, 'seed'),
    catalogUrl: flags.scheduler,
    access,
    ...(upload === undefined ? {} : { uploadBytesPerSecond: upload }),
    ...(flags.injectSeedCorruptStores === true ? { corruptStores: true } : {}),
  });
}

/** Each model's origin retries, summarised while an outage goes on (see originRetryReporter). */
const originRetries = new Map<string, (event: Omit<RetryEvent, 'error'>) => void>();

function originRetryOf(io: CliIo, model: string): (event: Omit<RetryEvent, 'error'>) => void {
  let report = originRetries.get(model);
  if (report === undefined) {
    report = originRetryReporter((line) => io.stdout(`model ${model.slice(0, 12)}: ${line}\n`));
    originRetries.set(model, report);
  }
  return report;
}

/**
 * Diagnostics: WEIGHTCAST_TRACE_PIECES=1 logs every event (each piece, the join, the registration)
 * and the moment the agent listens, as JSON lines on stderr with a wall-clock time, to study a run's
 * timing (bench/trace-report.ts). Read once: the environment is a slow lookup, and events come once
 * per piece.
 */
const TRACE = process.env['WEIGHTCAST_TRACE_PIECES'] === '1';

function printEvent(io: CliIo, event: AgentEvent, json: boolean): void {
  if (TRACE) io.stderr(JSON.stringify({ at: performance.timeOrigin + performance.now(), ...event }) + '\n');
  if (json) {
    if (event.type !== 'piece') io.stdout(JSON.stringify({ event: event.type, ...event }) + '\n');
    return;
  }
  if (event.type === 'loopback-unavailable') {
    io.stdout(`local API not on 127.0.0.1 (${event.reason}); pulls on this host need --agent URL\n`);
    return;
  }
  if (event.type === 'tcp-congestion-kept') {
    io.stderr(
      `weightcast agent: what peers are sent keeps the system's TCP congestion control: ${event.wanted} could not be set (${event.reason})\n`,
    );
    return;
  }
  const model = event.model.slice(0, 12);
  switch (event.type) {
    case 'joined':
      io.stdout(`model ${model}: joined, ${event.held} of ${event.pieces} pieces already verified here\n`);
      break;
    case 'registered':
      io.stdout(`model ${model}: registered with the scheduler as host ${event.host}\n`);
      break;
    case 'scheduler-lost':
      io.stdout(
        `model ${model}: no scheduler (${event.reason}); carrying on with known peers and the origin until it answers\n`,
      );
      break;
    case 'piece':
      if (event.outcome === 'corrupt') io.stdout(`model ${model}: ${corruptPieceText(event)}; refetching\n`);
      break;
    case 'ring-lost':
      io.stdout(
        `model ${model}: the ring feed from ${event.parent} ended (${event.reason}); the scheduler plans this host's pieces again\n`,
      );
      break;
    case 'ring-own':
      io.stdout(
        event.parent === undefined
          ? `model ${model}: no scheduler, and nobody ahead in the chain: this host reads the origin for the rest of it\n`
          : `model ${model}: no scheduler: this host's chain feed ended, so it subscribed to ${event.parent} itself\n`,
      );
      break;
    case 'complete':
      originRetries.delete(event.model);
      io.stdout(`model ${model}: complete; seeding\n`);
      break;
    case 'failed':
      originRetries.delete(event.model);
      io.stdout(`model ${model}: stopped: ${event.code}: ${event.reason}\n`);
      break;
    case 'origin-retry':
      originRetryOf(io, event.model)(event);
      break;
    case 'removed':
      io.stdout(
        `model ${model}: its files were deleted (${event.path}); forgotten, a pull fetches it anew\n`,
      );
      break;
    case 'resume-failed':
      io.stdout(`model ${model}: could not resume from the cache: ${event.reason}\n`);
      break;
    case 'not-resumed':
      io.stdout(
        `model ${model}: not resumed: it stopped with ${event.code}: ${event.reason}; a pull for it joins it again\n`,
      );
      break;
  }
}
