/**
 * The torch baselines of `npm run bench:load`. Runs `python/bench_torch_load.py` with Debian's Python
 * (python3-torch) or `WEIGHTCAST_PYTHON`, reads the one JSON object it prints, and turns it into table
 * rows shaped like the other benchmarks' (`what`, `baseline`, the two measured values, `goal`, `met`,
 * `note`). The script saves the model with `torch.save` once (a cache file beside the model directory
 * unless told otherwise), warms the page cache, then times `torch.load`, `torch.load(mmap=True)` where
 * torch has it, and weightcast's Python reader, each in a fresh process so peak RSS is per variant.
 *
 * Without torch the rows cannot exist: `torchBaselineRows` returns null and reports why through
 * `onSkip` (or prints it), so the benchmark still prints its other rows.
 */

import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { z } from 'zod';
import { formatBytes, formatSeconds } from '../src/util/units.js';

/** Debian's interpreter, where `apt-get install python3-torch` puts torch. */
export const PYTHON_DEFAULT = '/usr/bin/python3';
const SCRIPT = fileURLToPath(new URL('../../python/bench_torch_load.py', import.meta.url));
/** torch.save and torch.load of a 4 GB model take minutes on a small machine; this bounds a hang. */
const TIMEOUT_MS_DEFAULT = 60 * 60 * 1000;
const PROBE_TIMEOUT_MS = 30_000;
/** The script's exit code when its interpreter has no torch. */
const EXIT_TORCH_MISSING = 3;
/** The goal: streaming load at least this many times faster than torch.load. */
const TORCH_LOAD_SPEEDUP_GOAL = 5;

/** A benchmark table row, the same shape as bench/foundation.ts's. */
export interface Row {
  what: string;
  baseline: string;
  baselineRate: number;
  rate: number;
  goal: string;
  met: boolean | undefined;
  note: string;
  /** How to print the two measured values; rates by default. */
  unit?: 'rate' | 'bytes';
}

export interface TorchBaselineOptions {
  /** The interpreter; default `WEIGHTCAST_PYTHON`, then /usr/bin/python3. */
  python?: string;
  /** Where the torch.save file goes; default the model directory's path plus `.torch-save.pt`. */
  cachePath?: string;
  /** Read every file once before timing (default true), as the other rows of bench:load do. */
  warm?: boolean;
  /** weightcast's streaming load of the same model, to set against torch.load (goal >= 5x). */
  streamingLoadSeconds?: number;
  /** The label of that row; default 'streaming load into memory'. */
  streamingLabel?: string;
  /** Told why there are no rows; without it the reason is printed. */
  onSkip?: (reason: string) => void;
  signal?: AbortSignal;
  timeoutMs?: number;
}

const variantSchema = z.object({
  seconds: z.number(),
  load_seconds: z.number(),
  touch_seconds: z.number().nullable(),
  bytes: z.number(),
  tensors: z.number(),
  copied_tensors: z.number().optional(),
  peak_rss_bytes: z.number(),
  peak_rss_added_bytes: z.number().nullable(),
  /** Resident memory at the end, by kind (Linux): private (anon), mapped files, shared memory. */
  rss_anon_bytes: z.number().optional(),
  rss_file_bytes: z.number().optional(),
  rss_shmem_bytes: z.number().optional(),
  /** The sum of the touched bytes, printed so that the touching cannot be optimised away. */
  checksum: z.number().nullable(),
});
const skippedSchema = z.object({ skipped: z.string() });

const baselineSchema = z.object({
  model_dir: z.string(),
  files: z.number(),
  file_bytes: z.number(),
  tensor_bytes: z.number(),
  tensors: z.number(),
  python: z.string(),
  torch: z.string(),
  page_cache: z.string(),
  cache: z.object({
    path: z.string(),
    bytes: z.number(),
    reused: z.boolean(),
    save_seconds: z.number().nullable(),
  }),
  torch_load: variantSchema,
  torch_load_mmap: z.union([variantSchema, skippedSchema]),
  reader: variantSchema,
});

/** What bench_torch_load.py measured, as it printed it (snake_case, seconds, bytes). */
export type TorchBaseline = z.infer<typeof baselineSchema>;
export type TorchVariant = z.infer<typeof variantSchema>;

export function pythonInterpreter(env: NodeJS.ProcessEnv = process.env): string {
  const chosen = env['WEIGHTCAST_PYTHON'];
  return chosen !== undefined && chosen !== '' ? chosen : PYTHON_DEFAULT;
}

interface ChildResult {
  status: number | null;
  stdout: string;
  stderr: string;
}

/**
 * Runs Python in its own process group, so that a timeout or an abort also ends the processes the
 * script starts for each measurement.
 */
function runPython(
  python: string,
  args: readonly string[],
  timeoutMs: number,
  signal: AbortSignal | undefined,
): Promise<ChildResult> {
  return new Promise((resolve, reject) => {
    signal?.throwIfAborted();
    const child = spawn(python, args, { stdio: ['ignore', 'pipe', 'pipe'], detached: true });
    let stdout = '';
    let stderr = '';
    let stopped: Error | undefined;
    const stop = (reason: Error): void => {
      stopped ??= reason;
      if (child.pid !== undefined && child.exitCode === null) {
        try {
          process.kill(-child.pid, 'SIGTERM');
        } catch {
          // The group is already gone.
        }
      }
    };
    const timer = setTimeout(() => stop(new Error(`${python} timed out after ${timeoutMs} ms`)), timeoutMs);
    const onAbort = (): void => stop(signal?.reason instanceof Error ? signal.reason : new Error('aborted'));
    signal?.addEventListener('abort', onAbort, { once: true });
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    const finish = (): void => {
      clearTimeout(timer);
      signal?.removeEventListener('abort', onAbort);
    };
    child.once('error', (error) => {
      finish();
      reject(error);
    });
    child.once('close', (status) => {
      finish();
      if (stopped !== undefined) reject(stopped);
      else resolve({ status, stdout, stderr });
    });
  });
}

/** Why torch baselines cannot run with this interpreter, or undefined when they can. */
export async function torchProblem(python: string, signal?: AbortSignal): Promise<string | undefined> {
  // find_spec locates torch without the seconds an import takes.
  const probe = 'import importlib.util, sys; sys.exit(importlib.util.find_spec("torch") is None)';
  let result: ChildResult;
  try {
    result = await runPython(python, ['-c', probe], PROBE_TIMEOUT_MS, signal);
  } catch (error) {
    if (signal?.aborted) throw error;
    const reason = error instanceof Error ? error.message : String(error);
    return `${python} cannot run (${reason}); set WEIGHTCAST_PYTHON`;
  }
  if (result.status !== 0)
    return `${python} has no torch (apt-get install python3-torch, or set WEIGHTCAST_PYTHON)`;
  return undefined;
}

/** Runs the script; `{ skipped }` when torch is missing, an error when the script fails otherwise. */
export async function measureTorchBaseline(
  modelDir: string,
  options: TorchBaselineOptions = {},
): Promise<TorchBaseline | { skipped: string }> {
  const python = options.python ?? pythonInterpreter();
  const problem = await torchProblem(python, options.signal);
  if (problem !== undefined) return { skipped: problem };
  const args = [SCRIPT, modelDir];
  if (options.cachePath !== undefined) args.push('--cache', options.cachePath);
  if (options.warm === false) args.push('--no-warm');
  const result = await runPython(python, args, options.timeoutMs ?? TIMEOUT_MS_DEFAULT, options.signal);
  if (result.status === EXIT_TORCH_MISSING) return { skipped: `${python}: ${result.stderr.trim()}` };
  if (result.status !== 0) {
    throw new Error(`bench_torch_load.py exited ${result.status}: ${result.stderr.slice(-2000)}`);
  }
  return baselineSchema.parse(JSON.parse(result.stdout));
}

/** Table rows from a measurement: the reader and (when given) streaming load against torch.load. */
export function torchRows(baseline: TorchBaseline, options: TorchBaselineOptions = {}): Row[] {
  const bytes = baseline.tensor_bytes;
  const torchLoad = baseline.torch_load;
  const reader = baseline.reader;
  const torchLoadLabel = 'torch.load, weights_only';
  const rows: Row[] = [];
  if (options.streamingLoadSeconds !== undefined) {
    const speedup = torchLoad.seconds / options.streamingLoadSeconds;
    rows.push({
      what: options.streamingLabel ?? 'streaming load into memory',
      baseline: torchLoadLabel,
      baselineRate: bytes / torchLoad.seconds,
      rate: bytes / options.streamingLoadSeconds,
      goal: `>= ${TORCH_LOAD_SPEEDUP_GOAL.toFixed(1)}`,
      met: speedup >= TORCH_LOAD_SPEEDUP_GOAL,
      note: `torch ${baseline.torch}: torch.load ${shortSeconds(torchLoad.seconds)}`,
    });
  }
  const mmapVariant = 'skipped' in baseline.torch_load_mmap ? undefined : baseline.torch_load_mmap;
  const copied = reader.copied_tensors ?? 0;
  rows.push({
    what: 'python reader, zero-copy open + touch',
    baseline: torchLoadLabel,
    baselineRate: bytes / torchLoad.seconds,
    rate: bytes / reader.seconds,
    goal: '',
    met: undefined,
    note:
      `open ${shortSeconds(reader.load_seconds)}, touch ${shortSeconds(reader.touch_seconds ?? 0)}` +
      (copied > 0 ? `, ${copied} misaligned tensors copied` : '') +
      (mmapVariant === undefined ? `; torch ${baseline.torch} has no torch.load(mmap=True)` : ''),
  });
  if (mmapVariant !== undefined) {
    rows.push({
      what: 'python reader, zero-copy open + touch',
      baseline: 'torch.load mmap=True + touch',
      baselineRate: bytes / mmapVariant.seconds,
      rate: bytes / reader.seconds,
      goal: '',
      met: undefined,
      note: `torch.load(mmap) ${shortSeconds(mmapVariant.seconds)}`,
    });
  }
  rows.push({
    what: 'python reader peak RSS over interpreter',
    baseline: 'torch.load peak RSS over interpreter',
    baselineRate: torchLoad.peak_rss_added_bytes ?? torchLoad.peak_rss_bytes,
    rate: reader.peak_rss_added_bytes ?? reader.peak_rss_bytes,
    goal: '',
    met: undefined,
    note: anonNote(torchLoad, reader),
    unit: 'bytes',
  });
  return rows;
}

/** Opening and touching a small model takes milliseconds; seconds alone would print 0.00 s. */
function shortSeconds(seconds: number): string {
  return seconds < 1 ? `${(seconds * 1000).toFixed(1)} ms` : formatSeconds(seconds);
}

/** Mapped file pages count in RSS but are the shared page cache; private memory is the anonymous part. */
function anonNote(torchLoad: TorchVariant, reader: TorchVariant): string {
  if (torchLoad.rss_anon_bytes === undefined || reader.rss_anon_bytes === undefined) return '';
  return `anonymous at end: torch.load ${formatBytes(torchLoad.rss_anon_bytes)}, reader ${formatBytes(reader.rss_anon_bytes)}`;
}

/**
 * The torch rows for bench:load, or null when this machine has no torch for the interpreter (the
 * reason goes to `onSkip`, or is printed).
 */
export async function torchBaselineRows(
  modelDir: string,
  options: TorchBaselineOptions = {},
): Promise<Row[] | null> {
  const measured = await measureTorchBaseline(modelDir, options);
  if ('skipped' in measured) {
    if (options.onSkip !== undefined) options.onSkip(measured.skipped);
    else console.log(`torch baselines skipped: ${measured.skipped}`);
    return null;
  }
  return torchRows(measured, options);
}
