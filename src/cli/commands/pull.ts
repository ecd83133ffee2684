/** `weightcast pull SRC --to DIR`: a verified, resumable, memory-bounded download of a model. */

import { isWeightcastError, type ErrorCode } from '../../errors.js';
import { loadManifest, type Manifest } from '../../manifest/manifest.js';
import { CONCURRENCY_DEFAULT, pull, type PullEvent } from '../../pull/pull.js';
import {
  formatBytes,
  formatRate,
  formatSeconds,
  parseByteSize,
  parseMbps,
  parsePositiveInt,
} from '../../util/units.js';
import { reportError, type CliIo } from '../io.js';
import { createProgress, type Progress } from '../progress.js';
import { openSource, serviceUrlFlag } from './shared.js';
import { SEED_READS_PER_NODE } from '../definitions/pull.js';
import { agentPull, swarmPull } from '../../swarm/swarm-pull.js';
import { WeightcastError } from '../../errors.js';
import type * as SeedRead from '../../seed/read/open.js';

/** Failures after which running the same pull again makes progress. */
const RESUMABLE_CODES = new Set<ErrorCode>([
  'ABORTED',
  'ORIGIN_RETRIES_EXHAUSTED',
  'ORIGIN_TIMEOUT',
  'ORIGIN_SHORT_READ',
  'PIECE_HASH_MISMATCH',
]);

export interface PullFlags {
  to: string;
  manifest?: string;
  digest?: string;
  concurrency?: string;
  memoryMb: string;
  pieceSize?: string;
  token?: string;
  json?: boolean;
  scheduler?: string;
  agent?: string;
  listen?: string;
  advertise?: string;
  uploadMbps?: string;
  downloadMbps?: string;
  seeds?: string;
}

const SEED_READS_MAX = 64;

/** `--seeds`: the seed tier's reader (and undici under it), loaded only when asked for. */
async function openSeedSource(
  ...args: Parameters<typeof SeedRead.openSeedSource>
): ReturnType<typeof SeedRead.openSeedSource> {
  const { openSeedSource } = await import('../../seed/read/open.js');
  return openSeedSource(...args);
}

/** What `weightcast pull` runs: through the swarm with --scheduler or --agent, else from the origin. */
export async function runPull(src: string, flags: PullFlags, io: CliIo): Promise<number> {
  return flags.scheduler !== undefined || flags.agent !== undefined
    ? swarmPullCommand(src, flags, io)
    : pullCommand(src, flags, io);
}

export async function pullCommand(src: string, flags: PullFlags, io: CliIo): Promise<number> {
  const json = flags.json === true;
  const progress = createProgress(io, 'pulling', json);
  try {
    const memoryBytes = parsePositiveInt(flags.memoryMb, '--memory-mb') * 1024 * 1024;
    const pieceSize =
      flags.pieceSize === undefined ? undefined : parseByteSize(flags.pieceSize, '--piece-size');
    let manifest: Manifest | undefined;
    if (flags.manifest !== undefined) {
      manifest = await loadManifest(flags.manifest, {
        signal: io.signal,
        ...(flags.digest !== undefined ? { expectDigest: flags.digest } : {}),
      });
    }
    const seeded =
      flags.seeds === undefined ? undefined : await openSeedSource(src, flags.seeds, manifest, io.signal);
    manifest = seeded?.manifest ?? manifest;
    // From the seed tier every node's link is a path of its own: keep a few reads on each.
    const concurrency =
      flags.concurrency !== undefined
        ? parsePositiveInt(flags.concurrency, '--concurrency')
        : seeded !== undefined
          ? Math.min(SEED_READS_MAX, SEED_READS_PER_NODE * seeded.origin.primaryNodes)
          : CONCURRENCY_DEFAULT;
    const files = manifest?.files.map((f) => ({ path: f.path, size: f.size }));
    const origin =
      seeded?.origin ??
      openSource(src, { ...flags, connections: concurrency, ...(files ? { files } : {}) }, progress);
    const started = performance.now();
    try {
      const result = await pull(origin, flags.to, {
        concurrency,
        memoryBytes,
        signal: io.signal,
        onEvent: (event) => onPullEvent(event, progress, io, json),
        ...(manifest !== undefined ? { manifest } : {}),
        ...(pieceSize !== undefined ? { pieceSize } : {}),
      });
      progress.finish();
      const seconds = (performance.now() - started) / 1000;
      const summary = {
        event: 'done',
        verified: !result.trust,
        trustedOrigin: result.trust,
        digest: result.manifestDigest,
        files: result.manifest.files.length,
        bytes: result.bytesTotal,
        bytesFetched: result.bytesFetched,
        piecesFetched: result.piecesFetched,
        piecesReused: result.piecesReused,
        piecesRejected: result.piecesRejected,
        seconds,
        bytesPerSecond: seconds > 0 ? Math.round(result.bytesFetched / seconds) : null,
        // maxRSS is in kilobytes: the peak resident memory of this process so far.
        peakRssBytes: process.resourceUsage().maxRSS * 1024,
        to: flags.to,
      };
      if (json) io.stdout(JSON.stringify(summary) + '\n');
      else {
        const check = result.trust
          ? 'every piece hashed; checked against a manifest built from the origin itself (the origin is trusted)'
          : 'every piece verified against the manifest';
        io.stdout(
          `pulled ${result.manifest.files.length} files, ${formatBytes(result.bytesTotal)} into ${flags.to} in ${formatSeconds(seconds)} ` +
            `(${formatRate(result.bytesFetched, seconds)} fetched; ${result.piecesReused} pieces reused, ${result.piecesRejected} rejected)\n` +
            `${check}\nmodel ${result.manifestDigest}\n`,
        );
      }
      return 0;
    } finally {
      await origin.close();
    }
  } catch (error) {
    progress.finish();
    const code = reportError(io, error, json);
    if (!json && isWeightcastError(error) && RESUMABLE_CODES.has(error.code)) {
      io.stderr('weightcast: verified pieces are kept; run the same command again to continue\n');
    }
    return code;
  }
}

function onPullEvent(event: PullEvent, progress: Progress, io: CliIo, json: boolean): void {
  const line = (text: string, data: object): void => {
    if (json) io.stdout(JSON.stringify({ event: event.type, ...data }) + '\n');
    else progress.log(text);
  };
  switch (event.type) {
    case 'plan':
      if (event.trust) {
        line(
          'weightcast: no --manifest given: pieces are hashed but can only be checked against the origin itself (this trusts the origin)',
          event,
        );
      }
      if (event.piecesReused > 0)
        line(
          `weightcast: resuming: ${event.piecesReused} of ${event.piecesTotal} pieces already verified`,
          event,
        );
      else if (json) line('', event);
      break;
    case 'state-discarded':
      line(`weightcast: discarding an unrelated partial download: ${event.reason}`, event);
      break;
    case 'piece-rejected':
      line(
        `weightcast: rejected ${event.path} piece ${event.piece} (attempt ${event.attempt}): ${event.reason}`,
        event,
      );
      break;
    case 'progress':
      progress.update(event.bytesDone, event.bytesTotal);
      break;
    case 'file-complete':
      if (json) line('', event);
      break;
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

/** `pull --scheduler` (in-process swarm host) and `pull --agent` (through the local agent). */
async function swarmPullCommand(src: string, flags: PullFlags, io: CliIo): Promise<number> {
  const json = flags.json === true;
  const progress = createProgress(io, 'pulling', json);
  try {
    if (flags.scheduler !== undefined && flags.agent !== undefined) {
      throw new WeightcastError('USAGE', 'give --scheduler or --agent, not both');
    }
    if (flags.scheduler !== undefined) serviceUrlFlag(flags.scheduler, '--scheduler', 'http://10.0.0.1:7000');
    if (flags.agent !== undefined) serviceUrlFlag(flags.agent, '--agent', 'http://127.0.0.1:7001');
    if (flags.manifest === undefined) {
      throw new WeightcastError(
        'SWARM_NEEDS_MANIFEST',
        'a swarm pull needs --manifest: peers are only trusted for bytes that match it',
      );
    }
    const manifest = await loadManifest(flags.manifest, {
      signal: io.signal,
      ...(flags.digest !== undefined ? { expectDigest: flags.digest } : {}),
    });
    const token = flags.token ?? process.env['WEIGHTCAST_TOKEN'] ?? process.env['HF_TOKEN'];
    const started = performance.now();
    const onProgress = (status: { held: number; pieceCount: number; totalBytes: number }): void =>
      progress.update(
        status.pieceCount === 0
          ? status.totalBytes
          : Math.round((status.totalBytes * status.held) / status.pieceCount),
        status.totalBytes,
      );
    let summary: Record<string, unknown>;
    if (flags.scheduler !== undefined) {
      const listen = parseListen(flags.listen ?? '127.0.0.1:0');
      const upload = parseMbps(flags.uploadMbps, '--upload-mbps');
      const download = parseMbps(flags.downloadMbps, '--download-mbps');
      const result = await swarmPull(src, flags.to, {
        manifest,
        schedulerUrl: flags.scheduler,
        host: listen.host,
        port: listen.port,
        signal: io.signal,
        onProgress,
        onEvent: (event) => {
          if (event.type === 'scheduler-lost')
            progress.log(`weightcast: scheduler lost (${event.reason}); carrying on with known peers`);
          if (event.type === 'piece' && event.outcome === 'corrupt')
            progress.log(
              `weightcast: piece ${event.piece} from a ${event.from} failed verification; fetching it elsewhere`,
            );
        },
        ...(flags.advertise === undefined ? {} : { advertiseUrl: flags.advertise }),
        ...(upload === undefined ? {} : { uploadBytesPerSecond: upload }),
        ...(download === undefined ? {} : { downloadBytesPerSecond: download }),
        ...(token === undefined || token === '' ? {} : { token }),
      });
      summary = { ...result };
    } else {
      const { status } = await agentPull(src, flags.to, {
        manifest,
        agentUrl: flags.agent as string,
        signal: io.signal,
        onProgress,
        onAgentComplete: () => {
          const seconds = (performance.now() - started) / 1000;
          if (json) io.stdout(JSON.stringify({ event: 'agent-complete', seconds }) + '\n');
          else
            progress.log(
              `weightcast: the agent holds the verified model after ${formatSeconds(seconds)}; copying it out`,
            );
        },
        ...(token === undefined || token === '' ? {} : { token }),
      });
      summary = {
        manifestDigest: `sha256:${status.model}`,
        bytesTotal: status.totalBytes,
        originBytes: status.originBytes,
        peerBytes: status.peerBytes,
        corruptPieces: status.corruptPieces,
      };
    }
    progress.finish();
    const seconds = (performance.now() - started) / 1000;
    if (json)
      io.stdout(JSON.stringify({ event: 'done', verified: true, seconds, to: flags.to, ...summary }) + '\n');
    else {
      io.stdout(
        `pulled ${manifest.files.length} files, ${formatBytes(Number(summary['bytesTotal']))} into ${flags.to} in ${formatSeconds(seconds)} through the swarm\n` +
          `${formatBytes(Number(summary['originBytes']))} from the origin, ${formatBytes(Number(summary['peerBytes']))} from peers` +
          (flags.agent !== undefined ? ' (by the agent)' : '') +
          `; every piece verified against the manifest\nmodel ${String(summary['manifestDigest'])}\n`,
      );
    }
    return 0;
  } catch (error) {
    progress.finish();
    return reportError(io, error, json);
  }
}
