/**
 * `weightcast plan SRC --tp T [--pp P] [--ep E] [--weights w1,w2,..] [--rank R] [--json]`: what every
 * rank of a parallel layout holds of a local model (whole tensors or slices), the byte ranges of the
 * source files each needs, and totals. With `--hash --out FILE` it also reads every slice's bytes and
 * writes the plan manifest (a SHA-256 per rank per slice). The plan itself is src/loader/plan; this
 * module parses flags, reads the directory and prints.
 */

import { WeightcastError } from '../../errors.js';
import { buildParallelPlan } from '../../loader/plan/build.js';
import { buildPlanManifest, readModelDirectory, writePlanManifest } from '../../loader/plan/files.js';
import type {
  ByteRun,
  ParallelPlan,
  ParallelismOptions,
  RankPlan,
  RankTensor,
} from '../../loader/plan/types.js';
import { countOf, formatBytes, parsePositiveInt } from '../../util/units.js';
import { EXIT_OK, reportError, type CliIo } from '../io.js';
import { printable, textTable } from '../../util/text-table.js';

export interface PlanFlags {
  tp: string;
  pp?: string;
  ep?: string;
  weights?: string;
  rank?: string;
  json?: boolean;
  hash?: boolean;
  out?: string;
  replicateUnknown?: boolean;
}

/** Errors in what the user asked for or in the model given: exit code 2, like bad flags. */

export async function planCommand(src: string, flags: PlanFlags, io: CliIo): Promise<number> {
  const json = flags.json === true;
  try {
    const options = parseOptions(flags);
    if (flags.hash === true && flags.out === undefined)
      throw new WeightcastError('USAGE', '--hash needs --out FILE');
    if (flags.hash !== true && flags.out !== undefined)
      throw new WeightcastError('USAGE', '--out is only used with --hash');
    refuseUrl(src);
    const source = await readModelDirectory(src, { signal: io.signal });
    const plan = buildParallelPlan(source, options);
    const rank = flags.rank === undefined ? undefined : parseRank(flags.rank, plan.ranks.length);
    const shown = rank === undefined ? plan.ranks : plan.ranks.filter((candidate) => candidate.rank === rank);
    if (flags.hash === true && flags.out !== undefined) {
      const manifest = await buildPlanManifest(source, plan, { signal: io.signal });
      const digest = await writePlanManifest(flags.out, manifest);
      const slices = manifest.ranks.reduce((total, entry) => total + entry.tensors.length, 0);
      if (json)
        io.stdout(
          JSON.stringify({
            event: 'plan-manifest',
            digest,
            out: flags.out,
            ranks: manifest.ranks.length,
            slices,
          }) + '\n',
        );
      else
        io.stdout(
          `${renderText(plan, shown)}\n${digest}\nplan manifest with ${slices} slice digests over ${countOf(manifest.ranks.length, 'rank')} written to ${flags.out}\n`,
        );
      return EXIT_OK;
    }
    if (json) io.stdout(JSON.stringify({ event: 'plan', ...plan, ranks: shown }) + '\n');
    else io.stdout(renderText(plan, shown));
    return EXIT_OK;
  } catch (error) {
    return reportError(io, error, json);
  }
}

/** A plan reads config.json and the headers from disk: a URL was joined into a mangled path. */
function refuseUrl(src: string): void {
  if (/^[A-Za-z][A-Za-z0-9+.-]+:\/\//.test(src)) {
    throw new WeightcastError(
      'USAGE',
      `plan needs a local model directory, not a URL (${src}): pull the model first, or load one rank straight from the URL with load --tp`,
    );
  }
}

function parseOptions(flags: PlanFlags): ParallelismOptions {
  const options: ParallelismOptions = {
    tp: parsePositiveInt(flags.tp, '--tp'),
    pp: parsePositiveInt(flags.pp ?? '1', '--pp'),
    ep: parsePositiveInt(flags.ep ?? '1', '--ep'),
    unknownTensors: flags.replicateUnknown === true ? 'replicate' : 'error',
  };
  if (flags.weights !== undefined) {
    options.weights = flags.weights.split(',').map((part) => parsePositiveInt(part, '--weights'));
  }
  return options;
}

function parseRank(text: string, ranks: number): number {
  const rank = Number(text);
  if (!/^\d+$/.test(text.trim()) || rank >= ranks) {
    throw new WeightcastError(
      'USAGE',
      `--rank must be an integer from 0 to ${ranks - 1}, got ${JSON.stringify(text)}`,
    );
  }
  return rank;
}

function renderText(plan: ParallelPlan, ranks: readonly RankPlan[]): string {
  const layout = `tp ${plan.tp}, pp ${plan.pp}, ep ${plan.ep}${plan.weights === null ? '' : `, weights ${plan.weights.join(',')}`}`;
  const lines = [
    `${plan.architecture}: ${layout}: ${countOf(plan.ranks.length, 'rank')}; model ${formatBytes(plan.modelBytes)}; ` +
      `vocab ${plan.vocab.size} padded to ${plan.vocab.padded}`,
  ];
  for (const name of plan.skipped) lines.push(`skipped ${name} (not loaded by the model)`);
  for (const warning of plan.warnings) lines.push(`warning: ${warning}`);
  for (const rank of ranks) lines.push('', ...rankLines(plan, rank));
  return lines.map(printable).join('\n') + '\n';
}

function rankLines(plan: ParallelPlan, rank: RankPlan): string[] {
  const t = rank.totals;
  const share = plan.modelBytes === 0 ? 0 : (100 * t.sourceBytes) / plan.modelBytes;
  const experts =
    rank.experts[1] > rank.experts[0] ? `, experts ${rank.experts[0]}-${rank.experts[1] - 1}` : '';
  const header =
    `rank ${rank.rank} (stage ${rank.stage}, tp rank ${rank.tpRank}, layers ${rank.layers[0]}-${rank.layers[1] - 1}${experts}): ` +
    `${t.tensors} tensors (${t.slicedTensors} sliced, ${t.replicatedTensors} whole); ` +
    `slices ${formatBytes(t.sliceBytes)} + whole ${formatBytes(t.replicatedBytes)} = ${formatBytes(t.sourceBytes)} ` +
    `(${share.toFixed(1)}% of the model) in ${t.rangeCount} ranges`;
  const rows = rank.tensors.map((tensor) => [
    tensor.name,
    tensor.dtype,
    sliceText(tensor),
    tensor.sliceShape.join('x') || 'scalar',
    formatBytes(tensor.bytes),
    tensor.file,
    tensor.ranges.map(runText).join(' ') || '-',
  ]);
  return [
    header,
    ...textTable(['TENSOR', 'DTYPE', 'SLICE', 'SHAPE', 'BYTES', 'FILE', 'RANGES'], rows, [4]).map(
      (line) => `  ${line}`,
    ),
  ];
}

function sliceText(tensor: RankTensor): string {
  const { slice } = tensor;
  if (slice === null) return 'whole';
  const padding = slice.padded !== undefined && slice.padded !== slice.length ? ` pad ${slice.padded}` : '';
  return `dim${slice.dim} [${slice.start}, ${slice.start + slice.length})${padding}`;
}

/** `@offset+length` for one range; `@offset 512x256/1024` for 512 ranges of 256 bytes, 1024 apart. */
function runText(run: ByteRun): string {
  return run.count === 1
    ? `@${run.offset}+${run.length}`
    : `@${run.offset} ${run.count}x${run.length}/${run.stride}`;
}
