/**
 * `weightcast load SRC --format hf|shm [--to DIR]`: streams a model's tensors into memory as their
 * bytes arrive (verified against `--manifest` when given) and writes them out: `hf` reproduces the
 * original files byte for byte, `shm` writes safetensors files into a shared-memory directory.
 *
 * With `--tp T --rank R` it loads one rank of a parallel layout instead (src/loader/slice): only the
 * bytes the rank's slices need, verified by `--plan-manifest` or the model manifest's pieces, written
 * as `hf`, `shm` or vLLM `sharded-state` files; `--agent URL` reads through the local agent.
 */

import { basename } from 'node:path';
import { WeightcastError } from '../../errors.js';
import { loadManifest, type Manifest } from '../../manifest/manifest.js';
import { SHM_ROOT_DEFAULT } from '../../loader/stream/defaults.js';
import { loadModel, type LoadModelResult } from '../../loader/stream/load-model.js';
import { readPlanManifest } from '../../loader/plan/files.js';
import type { ParallelismOptions } from '../../loader/plan/types.js';
import { loadRank, type LoadRankResult } from '../../loader/slice/load-rank.js';
import type { SliceFormat } from '../../loader/slice/outputs.js';
import { countOf, formatBytes, formatRate, formatSeconds, parsePositiveInt } from '../../util/units.js';
import { reportError, type CliIo } from '../io.js';
import { createProgress } from '../progress.js';
import { openSource } from './shared.js';
import { serviceUrlFlag } from './service-url.js';
import { peakRssBytes } from '../../util/peak-rss.js';

const MiB = 1024 * 1024;

export interface LoadFlags {
  to?: string;
  tp?: string;
  rank?: string;
  pp?: string;
  stage?: string;
  ep?: string;
  weights?: string;
  planManifest?: string;
  planDigest?: string;
  agent?: string;
  order?: string;
  partMb?: string;
  replicateUnknown?: boolean;
  format: string;
  memoryMb: string;
  concurrency: string;
  manifest?: string;
  digest?: string;
  token?: string;
  json?: boolean;
}

export async function loadCommand(src: string, flags: LoadFlags, io: CliIo): Promise<number> {
  if (flags.tp !== undefined || flags.rank !== undefined) return loadRankCommand(src, flags, io);
  const json = flags.json === true;
  const progress = createProgress(io, 'loading', json);
  try {
    refuseRankFlags(flags);
    refuseLoneDigests(flags);
    const format = parseFormat(flags.format);
    const memoryBytes = parsePositiveInt(flags.memoryMb, '--memory-mb') * MiB;
    const concurrency = parsePositiveInt(flags.concurrency, '--concurrency');
    if (format === 'hf' && flags.to === undefined)
      throw new WeightcastError('USAGE', '--format hf needs --to DIR');
    const to = flags.to ?? `${SHM_ROOT_DEFAULT}/${outputName(src)}`;
    let manifest: Manifest | undefined;
    if (flags.manifest !== undefined) {
      manifest = await loadManifest(flags.manifest, {
        signal: io.signal,
        ...(flags.digest !== undefined ? { expectDigest: flags.digest } : {}),
      });
    }
    const files = manifest?.files.map((f) => ({ path: f.path, size: f.size }));
    const origin = openSource(
      src,
      { ...flags, connections: concurrency, ...(files ? { files } : {}) },
      progress,
    );
    let result: LoadModelResult;
    try {
      result = await loadModel(origin, {
        to,
        format,
        memoryBytes,
        concurrency,
        signal: io.signal,
        ...(manifest === undefined ? {} : { manifest }),
        onEvent: (event) => {
          if (event.type === 'progress') progress.update(event.bytesDelivered, event.bytesTotal);
          else if (!event.verified && !json) {
            progress.log(
              'weightcast: no --manifest given: bytes are checked for shape only, the origin is trusted',
            );
          }
        },
      });
    } finally {
      await origin.close();
    }
    progress.finish();
    const summary = {
      event: 'done',
      ...result,
      mibPerSecond: result.seconds > 0 ? result.bytes / MiB / result.seconds : null,
      peakRssBytes: peakRssBytes(),
    };
    if (json) io.stdout(JSON.stringify(summary) + '\n');
    else io.stdout(renderModelSummary(summary));
    return 0;
  } catch (error) {
    progress.finish();
    return reportError(io, error, json);
  }
}

function renderModelSummary(result: LoadModelResult & { peakRssBytes: number }): string {
  return (
    `loaded ${result.tensors} tensors, ${formatBytes(result.bytes)} in ${countOf(result.files, 'file')} into ${result.to} (${result.format}) ` +
    `in ${formatSeconds(result.seconds)}, ${formatRate(result.bytes, result.seconds)}\n` +
    `peak RSS ${formatBytes(result.peakRssBytes)}; buffers at most ${formatBytes(result.residentBytesPeak)} of the ${formatBytes(result.memoryBytes)} budget\n` +
    (result.verified
      ? `every byte verified: ${result.piecesVerified} pieces against the manifest\n`
      : 'not verified: no manifest (headers validated, bytes trusted)\n')
  );
}

/**
 * The flags of a one-rank load, given without --tp and --rank: refused rather than ignored (a
 * whole-model load with `--order random` or `--pp 0` used to exit 0). Their values are checked
 * first, so that a bad one gets the message `plan` gives for it.
 */
function refuseRankFlags(flags: LoadFlags): void {
  parseOrder(flags.order);
  if (flags.pp !== undefined) parsePositiveInt(flags.pp, '--pp');
  if (flags.ep !== undefined) parsePositiveInt(flags.ep, '--ep');
  if (flags.partMb !== undefined) parsePositiveInt(flags.partMb, '--part-mb');
  const given = Object.entries(RANK_FLAGS)
    .filter(([key]) => flags[key as keyof typeof RANK_FLAGS] !== undefined)
    .map(([, flag]) => flag);
  if (given.length > 0) {
    throw new WeightcastError(
      'USAGE',
      `${given.join(', ')} ${given.length === 1 ? 'applies' : 'apply'} to loading one rank: give --tp and --rank`,
    );
  }
}

const RANK_FLAGS = {
  pp: '--pp',
  stage: '--stage',
  ep: '--ep',
  weights: '--weights',
  replicateUnknown: '--replicate-unknown',
  planManifest: '--plan-manifest',
  planDigest: '--plan-digest',
  agent: '--agent',
  order: '--order',
  partMb: '--part-mb',
} as const satisfies Partial<Record<keyof LoadFlags, string>>;

function parseOrder(text: string | undefined): 'model' | 'file' {
  const order = text ?? 'model';
  if (order !== 'model' && order !== 'file')
    throw new WeightcastError('USAGE', `--order must be model or file, got ${JSON.stringify(order)}`);
  return order;
}

function parseFormat(text: string): 'hf' | 'shm' {
  if (text === 'hf' || text === 'shm') return text;
  throw new WeightcastError(
    'USAGE',
    `--format must be hf or shm (sharded-state needs --tp and --rank), got ${JSON.stringify(text)}`,
  );
}

/** The last path segment of SRC, made safe for a directory name. */
export function outputName(src: string): string {
  const trimmed = src.replace(/[?#].*$/, '').replace(/\/+$/, '');
  const name = basename(trimmed).replace(/[^A-Za-z0-9._-]/g, '_');
  return name === '' || name === '.' || name === '..' ? 'model' : name;
}

/** A digest checks the file given beside it: without that file it would be ignored and the load pass unchecked. */
function refuseLoneDigests(flags: LoadFlags): void {
  if (flags.digest !== undefined && flags.manifest === undefined)
    throw new WeightcastError(
      'USAGE',
      '--digest checks the manifest given with --manifest: give the manifest file too',
    );
  if (flags.planDigest !== undefined && flags.planManifest === undefined)
    throw new WeightcastError(
      'USAGE',
      '--plan-digest checks the plan manifest given with --plan-manifest: give that file too',
    );
}

/** `load --tp T --rank R ...`: one rank of a parallel layout, only the bytes its slices need. */
async function loadRankCommand(src: string, flags: LoadFlags, io: CliIo): Promise<number> {
  const json = flags.json === true;
  const progress = createProgress(io, 'loading rank', json);
  try {
    if (flags.tp === undefined || flags.rank === undefined) {
      throw new WeightcastError('USAGE', 'loading one rank needs both --tp and --rank');
    }
    refuseLoneDigests(flags);
    const format = parseSliceFormat(flags.format);
    const parallel: ParallelismOptions = {
      tp: parsePositiveInt(flags.tp, '--tp'),
      pp: parsePositiveInt(flags.pp ?? '1', '--pp'),
      ep: parsePositiveInt(flags.ep ?? '1', '--ep'),
      unknownTensors: flags.replicateUnknown === true ? 'replicate' : 'error',
      ...(flags.weights === undefined
        ? {}
        : { weights: flags.weights.split(',').map((part) => parsePositiveInt(part, '--weights')) }),
    };
    const rank = globalRank(flags, parallel);
    if (format !== 'shm' && flags.to === undefined)
      throw new WeightcastError('USAGE', `--format ${format} needs --to DIR`);
    const to = flags.to ?? `${SHM_ROOT_DEFAULT}/${outputName(src)}-rank-${rank}`;
    const order = parseOrder(flags.order);
    const manifest =
      flags.manifest === undefined
        ? undefined
        : await loadManifest(flags.manifest, {
            signal: io.signal,
            ...(flags.digest !== undefined ? { expectDigest: flags.digest } : {}),
          });
    const planManifest =
      flags.planManifest === undefined
        ? undefined
        : await readPlanManifest(flags.planManifest, {
            signal: io.signal,
            ...(flags.planDigest !== undefined ? { expectedDigest: flags.planDigest } : {}),
          });
    const concurrency = parsePositiveInt(flags.concurrency, '--concurrency');
    const token = flags.token ?? process.env['WEIGHTCAST_TOKEN'] ?? process.env['HF_TOKEN'];
    const result = await loadRank(src, {
      ...parallel,
      rank,
      to,
      format,
      memoryBytes: parsePositiveInt(flags.memoryMb, '--memory-mb') * MiB,
      concurrency,
      order: order === 'file' ? 'single' : 'model',
      partBytesMax: parsePositiveInt(flags.partMb ?? String(5 * 1024), '--part-mb') * MiB,
      originOptions: { connections: concurrency },
      signal: io.signal,
      ...(manifest === undefined ? {} : { manifest }),
      ...(planManifest === undefined ? {} : { planManifest }),
      ...(flags.agent === undefined
        ? {}
        : { agentUrl: serviceUrlFlag(flags.agent, '--agent', 'http://127.0.0.1:7001') }),
      ...(token === undefined || token === '' ? {} : { token }),
      onEvent: (event) => {
        if (event.type === 'progress') progress.update(event.bytesDelivered, event.bytesTotal);
        else if (event.type === 'planned' && event.verification === 'none' && !json) {
          progress.log(
            'weightcast: no --plan-manifest or --manifest given: headers are validated, the bytes are trusted',
          );
        } else if (event.type === 'first-layer' && !json) {
          progress.log(`weightcast: first layer in after ${formatSeconds(event.seconds)}`);
        }
      },
    });
    progress.finish();
    const summary = {
      event: 'done',
      ...result,
      peakRssBytes: peakRssBytes(),
    };
    if (json) io.stdout(JSON.stringify(summary) + '\n');
    else io.stdout(renderRankSummary(summary));
    return 0;
  } catch (error) {
    progress.finish();
    return reportError(io, error, json);
  }
}

function parseSliceFormat(text: string): SliceFormat {
  if (text === 'hf' || text === 'shm' || text === 'sharded-state') return text;
  throw new WeightcastError(
    'USAGE',
    `--format must be hf, shm or sharded-state, got ${JSON.stringify(text)}`,
  );
}

/** --rank is global, or the rank within --stage when a stage is given. */
function globalRank(flags: LoadFlags, parallel: ParallelismOptions): number {
  const rank = parseCount(flags.rank ?? '', '--rank');
  if (flags.stage === undefined) return rank;
  const stage = parseCount(flags.stage, '--stage');
  const perStage = Math.max(parallel.tp, parallel.ep ?? 1);
  if (stage >= (parallel.pp ?? 1))
    throw new WeightcastError('USAGE', `--stage must be below --pp, got ${stage}`);
  if (rank >= perStage)
    throw new WeightcastError('USAGE', `with --stage, --rank must be below ${perStage}, got ${rank}`);
  return stage * perStage + rank;
}

function parseCount(text: string, flag: string): number {
  if (!/^\d+$/.test(text.trim()))
    throw new WeightcastError('USAGE', `${flag} must be a non-negative integer, got ${JSON.stringify(text)}`);
  return Number(text);
}

function renderRankSummary(result: LoadRankResult & { peakRssBytes: number }): string {
  const rankBytes = result.sliceBytes + result.replicatedBytes;
  const ratio = result.fetchRatio === null ? '-' : `${result.fetchRatio.toFixed(3)} x`;
  const verified =
    result.verification === 'plan-manifest'
      ? `every slice verified: ${result.slicesVerified} SHA-256 digests from the plan manifest`
      : result.verification === 'pieces'
        ? `every byte verified: ${result.piecesVerified} pieces against the manifest`
        : 'not verified: no plan manifest or manifest (headers validated, bytes trusted)';
  return (
    `loaded rank ${result.rank} (stage ${result.stage}, tp rank ${result.tpRank}): ${result.tensors} tensors into ${result.to} (${result.format}) in ${formatSeconds(result.seconds)}` +
    (result.firstLayerSeconds === null
      ? ''
      : `, first layer after ${formatSeconds(result.firstLayerSeconds)}`) +
    `\nfetched ${formatBytes(result.bytesFetched)} for slices ${formatBytes(result.sliceBytes)} + whole ${formatBytes(result.replicatedBytes)} = ${formatBytes(rankBytes)} (${ratio}; the model is ${formatBytes(result.modelBytes)})` +
    `\npeak RSS ${formatBytes(result.peakRssBytes)}; buffers at most ${formatBytes(result.residentBytesPeak)} of the ${formatBytes(result.memoryBytes)} budget\n${verified}\n`
  );
}
