/**
 * `weightcast preshard SRC --tp T [--pp P] [--quantize fp8] [--layout hf|vllm] [--memory-mb M] --to DIR
 * [--json]`: writes each rank's tensors as vLLM `sharded_state` files (`model-rank-{r}-part-{p}`), the
 * config and tokenizer files, and a manifest saying where every output tensor came from. The work is
 * src/loader/preshard; this module parses flags and prints.
 */

import { loadManifest } from '../../manifest/manifest.js';
import { WeightcastError } from '../../errors.js';
import {
  PRESHARD_LAYOUTS,
  type PreshardLayout,
  type PreshardQuantisation,
} from '../../loader/preshard/layout.js';
import { preshard, type PreshardOptions, type PreshardResult } from '../../loader/preshard/preshard.js';
import { formatBytes, formatSeconds, parsePositiveInt } from '../../util/units.js';
import { reportError, type CliIo } from '../io.js';
import { createProgress } from '../progress.js';
import { peakRssBytes } from '../../util/peak-rss.js';

const MiB = 1024 * 1024;

export interface PreshardFlags {
  tp: string;
  pp: string;
  to: string;
  quantize?: string;
  layout: string;
  memoryMb: string;
  partMb?: string;
  concurrency: string;
  outputManifest: boolean;
  manifest?: string;
  digest?: string;
  token?: string;
  json?: boolean;
}

/** The user's request or model cannot be honoured: exit 2, like a bad flag. */

export async function preshardCommand(src: string, flags: PreshardFlags, io: CliIo): Promise<number> {
  const json = flags.json === true;
  const progress = createProgress(io, 'presharding', json);
  try {
    const options = parseFlags(flags, io.signal);
    const manifest =
      flags.manifest === undefined
        ? undefined
        : await loadManifest(flags.manifest, {
            signal: io.signal,
            ...(flags.digest === undefined ? {} : { expectDigest: flags.digest }),
          });
    if (!json && manifest === undefined) {
      progress.log(
        'weightcast: no --manifest given: bytes are checked for shape only, the origin is trusted',
      );
    }
    const result = await preshard(src, flags.to, {
      ...options,
      ...(manifest === undefined ? {} : { manifest }),
      onProgress: (done, total) => progress.update(done, total),
    });
    progress.finish();
    const peakRss = peakRssBytes();
    if (json)
      io.stdout(JSON.stringify({ event: 'done', ...summaryOf(result), peakRssBytes: peakRss }) + '\n');
    else io.stdout(describe(result, peakRss));
    return 0;
  } catch (error) {
    progress.finish();
    return reportError(io, error, json);
  }
}

function parseFlags(flags: PreshardFlags, signal: AbortSignal): PreshardOptions {
  const token = flags.token ?? process.env['WEIGHTCAST_TOKEN'] ?? process.env['HF_TOKEN'];
  return {
    tp: parsePositiveInt(flags.tp, '--tp'),
    pp: parsePositiveInt(flags.pp, '--pp'),
    layout: parseLayout(flags.layout),
    quantize: parseQuantize(flags.quantize),
    memoryBytes: parsePositiveInt(flags.memoryMb, '--memory-mb') * MiB,
    ...(flags.partMb === undefined ? {} : { partBytesMax: parsePartBytes(flags.partMb) }),
    concurrency: parsePositiveInt(flags.concurrency, '--concurrency'),
    outputManifest: flags.outputManifest,
    ...(token !== undefined && token !== '' ? { origin: { token } } : {}),
    signal,
  };
}

function parseLayout(text: string): PreshardLayout {
  const layout = PRESHARD_LAYOUTS.find((candidate) => candidate === text);
  if (layout === undefined)
    throw new WeightcastError('USAGE', `--layout must be hf or vllm, got ${JSON.stringify(text)}`);
  return layout;
}

function parseQuantize(text: string | undefined): PreshardQuantisation {
  if (text === undefined) return 'none';
  if (text === 'fp8') return 'fp8';
  throw new WeightcastError('USAGE', `--quantize must be fp8, got ${JSON.stringify(text)}`);
}

/** MiB, fractions allowed so tests can split parts at a few KiB. */
function parsePartBytes(text: string): number {
  const value = Number(text);
  if (!Number.isFinite(value) || value <= 0) {
    throw new WeightcastError('USAGE', `--part-mb must be a positive number, got ${JSON.stringify(text)}`);
  }
  return Math.max(1, Math.round(value * MiB));
}

function summaryOf(result: PreshardResult): Record<string, unknown> {
  return {
    to: result.to,
    architecture: result.architecture,
    tp: result.tp,
    pp: result.pp,
    layout: result.layout,
    quantize: result.quantize,
    ranks: result.ranks,
    copied: result.copied,
    sourceBytes: result.sourceBytes,
    bytesRead: result.bytesRead,
    bytesWritten: result.bytesWritten,
    memoryBytes: result.memory.memoryBytes,
    residentBytesPeak: result.residentBytesPeak,
    stagedUnits: result.stagedUnits,
    verified: result.verified,
    piecesVerified: result.piecesVerified,
    manifest: result.manifestFile,
    outputManifestDigest: result.outputManifestDigest,
    seconds: result.seconds,
  };
}

function describe(result: PreshardResult, peakRssBytes: number): string {
  const files = result.ranks.reduce((total, rank) => total + rank.files.length, 0);
  const tensors = result.ranks.reduce((total, rank) => total + rank.tensors, 0);
  const lines = [
    `pre-sharded ${result.architecture} for tp ${result.tp} x pp ${result.pp} (${result.layout} layout` +
      `${result.quantize === 'fp8' ? ', FP8' : ''}) into ${result.to}: ${tensors} tensors, ` +
      `${formatBytes(result.bytesWritten)} in ${files} files, in ${formatSeconds(result.seconds)}`,
    `read ${formatBytes(result.bytesRead)} for ${formatBytes(result.sourceBytes)} of source tensors, each once`,
    `peak RSS ${formatBytes(peakRssBytes)}; buffers at most ${formatBytes(result.residentBytesPeak)} of the ` +
      `${formatBytes(result.memory.memoryBytes)} budget`,
    result.verified
      ? `every byte verified: ${result.piecesVerified} pieces against the source manifest`
      : 'not verified: no source manifest (headers validated, bytes trusted)',
    `manifest ${result.manifestFile}` +
      (result.outputManifestDigest === null ? '' : `; output directory ${result.outputManifestDigest}`),
  ];
  for (const rank of result.ranks) {
    lines.push(
      `  rank ${rank.rank}: ${rank.tensors} tensors, ${formatBytes(rank.bytes)}, ${rank.files.join(', ')}`,
    );
  }
  return lines.join('\n') + '\n';
}
