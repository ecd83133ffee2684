/**
 * `weightcast synth`: writes a synthetic Hugging Face checkpoint (config, tokenizer files, sharded
 * safetensors, index) for tests, demos and benchmarks, then prints a summary or one JSON object. Flags
 * arrive as strings and are checked here, so that bad values are SYNTH_INVALID_OPTIONS errors that
 * `--json` can report like any other.
 */

import { isWeightcastError } from '../../errors.js';
import { invalidOptions, type ModelDims } from '../../synth/architectures.js';
import { parseArch, parseDtype, type SynthOptions } from '../../synth/plan.js';
import { synthesizeModel, type SynthProgress, type SynthResult } from '../../synth/synth.js';
import { EXIT_OK, EXIT_USAGE, reportError, type CliIo } from '../io.js';

export interface SynthFlags {
  to: string;
  arch: string;
  dtype: string;
  seed: string;
  sizeMb?: string;
  layers?: string;
  hidden?: string;
  experts?: string;
  heads?: string;
  vocab?: string;
  shards?: string;
  json?: boolean;
}

const MIB = 1024 * 1024;
const PROGRESS_INTERVAL_MS = 200;

export async function runSynth(flags: SynthFlags, io: CliIo): Promise<number> {
  const json = flags.json === true;
  try {
    const options = synthOptions(flags);
    const progress = io.stderrIsTTY && !json ? new ProgressLine(io) : undefined;
    const started = performance.now();
    let result: SynthResult;
    try {
      result = await synthesizeModel(options, {
        signal: io.signal,
        ...(progress === undefined ? {} : { onProgress: (update: SynthProgress) => progress.update(update) }),
      });
    } finally {
      progress?.clear();
    }
    const elapsedMs = performance.now() - started;
    io.stdout(json ? JSON.stringify(jsonSummary(result, elapsedMs)) + '\n' : humanSummary(result, elapsedMs));
    return EXIT_OK;
  } catch (error) {
    const exitCode = reportError(io, error, json);
    return isWeightcastError(error, 'SYNTH_INVALID_OPTIONS') ? EXIT_USAGE : exitCode;
  }
}

function synthOptions(flags: SynthFlags): SynthOptions & { dir: string } {
  const options: SynthOptions & { dir: string } = {
    dir: flags.to,
    arch: parseArch(flags.arch),
    dtype: parseDtype(flags.dtype),
    seed: parseCount('--seed', flags.seed),
  };
  if (flags.sizeMb !== undefined) options.sizeBytes = Math.round(parseMebibytes(flags.sizeMb) * MIB);
  const counts = ['layers', 'hidden', 'experts', 'heads', 'vocab', 'shards'] as const;
  for (const name of counts) {
    const text = flags[name];
    if (text !== undefined) options[name] = parseCount(`--${name}`, text);
  }
  return options;
}

function parseCount(flag: string, text: string): number {
  const value = Number(text);
  if (!/^\d+$/.test(text) || !Number.isSafeInteger(value)) {
    throw invalidOptions(`${flag} must be a whole number, got ${JSON.stringify(text)}`);
  }
  return value;
}

function parseMebibytes(text: string): number {
  const value = Number(text);
  if (!/^\d+(\.\d+)?$/.test(text) || !(value > 0)) {
    throw invalidOptions(`--size-mb must be a positive number, got ${JSON.stringify(text)}`);
  }
  return value;
}

function jsonSummary(result: SynthResult, elapsedMs: number): Record<string, unknown> {
  return {
    event: 'synthesized',
    ...result,
    elapsedMs: Math.round(elapsedMs),
    bytesPerSecond: Math.round(result.totalBytes / (elapsedMs / 1000)),
  };
}

function humanSummary(result: SynthResult, elapsedMs: number): string {
  const shards = result.files.filter((file) => file.path.endsWith('.safetensors')).length;
  const seconds = elapsedMs / 1000;
  return [
    `wrote ${result.arch} ${result.dtype} model to ${result.dir} (seed ${result.seed})`,
    `  dims     ${describeDims(result.dims)}`,
    `  files    ${shards} shard${shards === 1 ? '' : 's'} + ${result.files.length - shards} other, ` +
      `${formatMebibytes(result.totalBytes)} total`,
    `  tensors  ${result.tensorCount}, ${formatCount(result.parameterCount)} parameters`,
    `  time     ${seconds.toFixed(2)} s, ${formatMebibytes(result.totalBytes / seconds)}/s`,
    '',
  ].join('\n');
}

function describeDims(dims: ModelDims): string {
  const parts = [`hidden ${dims.hidden}`, `layers ${dims.layers}`, `heads ${dims.heads}`];
  if (dims.arch === 'deepseek-v3') {
    parts.push(
      `q_lora ${dims.qLoraRank}`,
      `kv_lora ${dims.kvLoraRank}`,
      `dense layers ${dims.firstDenseLayers}`,
      `experts ${dims.experts} (top ${dims.expertsPerToken}) x ${dims.moeIntermediate}`,
    );
  } else {
    parts.push(`kv heads ${dims.kvHeads}`, `head_dim ${dims.headDim}`);
    if (dims.arch === 'llama') parts.push(`intermediate ${dims.intermediate}`);
    else parts.push(`experts ${dims.experts} (top ${dims.expertsPerToken}) x ${dims.moeIntermediate}`);
  }
  parts.push(`vocab ${dims.vocab}`);
  return parts.join(', ');
}

function formatMebibytes(bytes: number): string {
  const mebibytes = bytes / MIB;
  return mebibytes >= 1024 ? `${(mebibytes / 1024).toFixed(2)} GiB` : `${mebibytes.toFixed(1)} MiB`;
}

function formatCount(count: number): string {
  if (count >= 1e9) return `${(count / 1e9).toFixed(2)} B`;
  if (count >= 1e6) return `${(count / 1e6).toFixed(1)} M`;
  return String(count);
}

/** One self-overwriting stderr line, redrawn at most every PROGRESS_INTERVAL_MS. */
class ProgressLine {
  private readonly startedMs = Date.now();
  // The first line waits one interval, so that its rate means something.
  private lastDrawMs = this.startedMs;

  constructor(private readonly io: CliIo) {}

  update(progress: SynthProgress): void {
    const now = Date.now();
    if (now - this.lastDrawMs < PROGRESS_INTERVAL_MS && progress.bytesWritten < progress.bytesTotal) return;
    this.lastDrawMs = now;
    const percent = Math.floor((100 * progress.bytesWritten) / progress.bytesTotal);
    const seconds = Math.max((now - this.startedMs) / 1000, 0.001);
    this.io.stderr(
      `\r\x1b[Ksynth ${percent}% ${formatMebibytes(progress.bytesWritten)} of ` +
        `${formatMebibytes(progress.bytesTotal)}, ${formatMebibytes(progress.bytesWritten / seconds)}/s ` +
        progress.file,
    );
  }

  clear(): void {
    this.io.stderr('\r\x1b[K');
  }
}
