/**
 * `npm run bench:load`: the streaming loader against baselines measured in the same run on the same
 * files. A synthetic llama checkpoint (4 GiB by default, `--size-mb N`) is written once into a temp
 * directory and reused by later runs. Rows:
 *   - raw `cat` of the safetensors files to /dev/null, warm page cache (and cold when root can drop
 *     caches through /proc/sys/vm/drop_caches); `sha256sum` and `openssl dgst -sha256` of the same
 *     files (one process per file, at once): the baselines of the verified stream; `cp` into
 *     /dev/shm: the baseline of the shm rows;
 *   - streaming load into memory (tensors consumed and discarded): in 16 MiB parts without and with a
 *     manifest, and in whole tensors (which needs a buffer the size of the largest tensor);
 *   - `weightcast load --format shm` (16 MiB parts into /dev/shm), and the same through the library
 *     with tensors in parts;
 *   - a one-file-at-a-time serial loader (readFile each file, then parse it);
 *   - torch.load of the same weights saved with torch.save, and the Python reader
 *     (bench/torch-baseline.ts; skipped with the reason when /usr/bin/python3 has no torch).
 * Every loader runs in a child process, so its peak RSS (VmHWM, src/util/peak-rss.ts) is its own.
 * Then slice-aware fetch (src/loader/slice): bytes fetched per rank against the rank's slice plus
 * replicated bytes, for TP 2, 4 and 8 on small synthetic llama and deepseek-v3 checkpoints, with a
 * plan manifest (goal <= 1.02 x) and with only the model manifest (whole pieces); and lazy loading
 * through an agent filling from a rate-capped origin (real processes on loopback): time to the first
 * layer against time to the whole rank.
 * Options: --size-mb N (default 4096), --memory-mb M (default 512: the peak RSS goal; the loaders'
 * buffers get M - 64 MiB, the rest is Node itself), --no-cold, --only stream|slice.
 */

import { spawn } from 'node:child_process';
import { mkdir, readFile, readdir, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { parseSafetensorsBuffer, readSafetensorsHeaderFromFile } from '../src/format/safetensors.js';
import { loadTensors } from '../src/loader/stream/load.js';
import { loadModel } from '../src/loader/stream/load-model.js';
import { buildParallelPlan } from '../src/loader/plan/build.js';
import { buildPlanManifest, readModelDirectory } from '../src/loader/plan/files.js';
import { loadRank, type LoadRankOptions } from '../src/loader/slice/load-rank.js';
import { buildManifest } from '../src/manifest/build.js';
import { loadManifest, PIECE_SIZE_DEFAULT, writeManifest, type Manifest } from '../src/manifest/manifest.js';
import { LocalOrigin } from '../src/origin/local.js';
import type { SynthArch } from '../src/synth/architectures.js';
import { planSynth } from '../src/synth/plan.js';
import { synthesizeModel } from '../src/synth/synth.js';
import { Cluster, type AgentStatus } from '../scripts/cluster.js';
import { BenchUsageError, flagNumber, readBenchArgs } from './bench-args.js';
import { torchBaselineRows, type Row as TorchRow } from './torch-baseline.js';
import { peakRssBytes } from '../src/util/peak-rss.js';

/** Parts of large tensors the in-memory and library shm rows ask for (`partBytes`). */
const PART_BYTES = 16 * 1024 * 1024;
const BIN = fileURLToPath(new URL('../../bin/weightcast.js', import.meta.url));
const SELF = fileURLToPath(import.meta.url);
const MiB = 1024 * 1024;
/** Node's own resident memory (code, heap, worker threads) next to the loader's buffers. */
const RUNTIME_ALLOWANCE_MB = 64;

interface Measured {
  seconds: number;
  peakRssBytes: number | undefined;
  note?: string;
}

interface Row {
  what: string;
  bytes: number;
  measured: Measured | undefined;
  goal: string;
  /** Filled in against the warm cat row. */
  met?: boolean;
}

// ---- child processes: one loader each, printing {seconds, peakRssBytes} -------------------------

async function childMain(kind: string, dir: string, memoryMb: number, manifestPath: string): Promise<void> {
  const started = performance.now();
  let bytes = 0;
  let checksum = 0;
  if (kind === 'serial') {
    for (const name of (await readdir(dir)).filter((n) => n.endsWith('.safetensors')).sort()) {
      const file = await readFile(join(dir, name));
      const header = parseSafetensorsBuffer(file, name);
      for (const tensor of header.tensors) {
        const view = file.subarray(tensor.start, tensor.end);
        checksum ^= view.length > 0 ? (view[view.length - 1] as number) : 0;
        bytes += view.length;
      }
    }
  } else if (kind === 'shm-parts') {
    bytes = await shmPartsChild(dir, memoryMb, manifestPath);
  } else {
    const manifest = kind.includes('verified') ? await loadManifest(manifestPath) : undefined;
    const parts = kind.endsWith('-parts');
    for await (const tensor of loadTensors(dir, {
      memoryBytes: memoryMb * MiB,
      ...(parts ? { partBytes: PART_BYTES } : {}),
      ...(manifest === undefined ? {} : { manifest }),
    })) {
      const view = tensor.bytes;
      checksum ^= view.length > 0 ? (view[view.length - 1] as number) : 0;
      bytes += view.length;
    }
  }
  const seconds = (performance.now() - started) / 1000;
  process.stdout.write(JSON.stringify({ seconds, bytes, checksum, peakRssBytes: peakRssBytes() }) + '\n');
}

/**
 * `weightcast load --format shm` through the library: the same `loadModel` call the CLI makes,
 * without the CLI's start. `manifestPath` is the output directory here. Returns the bytes of tensors
 * written.
 */
async function shmPartsChild(dir: string, memoryMb: number, to: string): Promise<number> {
  const result = await loadModel(dir, {
    to,
    format: 'shm',
    memoryBytes: memoryMb * MiB,
    partBytes: PART_BYTES,
  });
  return result.tensorBytes;
}

function run(command: string, args: readonly string[]): Promise<{ seconds: number; stdout: string }> {
  return new Promise((resolve, reject) => {
    const started = performance.now();
    const child = spawn(command, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    child.once('error', reject);
    child.once('exit', (code) => {
      const seconds = (performance.now() - started) / 1000;
      if (code === 0) resolve({ seconds, stdout });
      else reject(new Error(`${command} ${args.join(' ')} exited ${code}: ${stderr.slice(-2000)}`));
    });
  });
}

async function loaderChild(
  kind: string,
  dir: string,
  memoryMb: number,
  manifestPath: string,
): Promise<Measured> {
  const { stdout } = await run(process.execPath, [
    SELF,
    '--child',
    kind,
    dir,
    String(memoryMb),
    manifestPath,
  ]);
  const result = JSON.parse(stdout.trim().split('\n').at(-1) ?? '{}') as Measured;
  return { seconds: result.seconds, peakRssBytes: result.peakRssBytes };
}

// ---- baselines -------------------------------------------------------------------------------------

const WARM_RUNS = 3;

/** The fastest of `runs` runs; its peak RSS is the largest seen in any of them. */
async function bestOf(runs: number, measure: () => Promise<Measured>): Promise<Measured> {
  let best: Measured | undefined;
  let rssMax: number | undefined;
  for (let i = 0; i < runs; i++) {
    const m = await measure();
    if (m.peakRssBytes !== undefined) rssMax = Math.max(rssMax ?? 0, m.peakRssBytes);
    if (best === undefined || m.seconds < best.seconds) best = m;
  }
  if (best === undefined) throw new Error('bestOf needs at least one run');
  return { ...best, peakRssBytes: rssMax };
}

async function catFiles(files: readonly string[]): Promise<Measured> {
  const { seconds } = await run('sh', ['-c', 'cat "$@" > /dev/null', 'sh', ...files]);
  return { seconds, peakRssBytes: undefined };
}

/**
 * Baselines for the verified stream: SHA-256 of the same files, one process per file, all at once
 * (two files here, one per core). coreutils' sha256sum does not use the CPU's SHA instructions;
 * `openssl dgst` does, as Node's hashing does, so it is the rate a verified load can hope for.
 */
async function hashFiles(
  command: 'sha256sum' | 'openssl dgst -sha256',
  files: readonly string[],
): Promise<Measured> {
  const script = `for f in "$@"; do ${command} "$f" > /dev/null & done; wait`;
  const { seconds } = await run('sh', ['-c', script, 'sh', ...files]);
  return { seconds, peakRssBytes: undefined, note: `${files.length} at once` };
}

/** Baseline for the shm rows: the same files copied into shared memory by `cp`. */
async function copyToShm(files: readonly string[], to: string): Promise<Measured> {
  await rm(to, { recursive: true, force: true });
  await mkdir(to, { recursive: true });
  try {
    const { seconds } = await run('cp', [...files, to]);
    return { seconds, peakRssBytes: undefined };
  } finally {
    await rm(to, { recursive: true, force: true });
  }
}

/** Drops the page cache when this process may (root); false when it cannot. */
async function dropCaches(): Promise<boolean> {
  if (process.getuid?.() !== 0) return false;
  try {
    await run('sync', []);
    await writeFile('/proc/sys/vm/drop_caches', '3\n');
    return true;
  } catch {
    return false;
  }
}

async function shmLoad(dir: string, memoryMb: number, to: string): Promise<Measured> {
  await rm(to, { recursive: true, force: true });
  try {
    const { stdout } = await run(process.execPath, [
      BIN,
      'load',
      dir,
      '--format',
      'shm',
      '--to',
      to,
      '--memory-mb',
      String(memoryMb),
      '--json',
    ]);
    const summary = JSON.parse(stdout.trim().split('\n').at(-1) ?? '{}') as {
      seconds: number;
      peakRssBytes: number;
    };
    return { seconds: summary.seconds, peakRssBytes: summary.peakRssBytes };
  } finally {
    await rm(to, { recursive: true, force: true });
  }
}

// ---- the synthetic model, cached between runs ------------------------------------------------------

async function cachedModel(sizeMb: number): Promise<{ dir: string; manifestPath: string }> {
  const root = join(tmpdir(), `weightcast-bench-load-${sizeMb}mb`);
  const dir = join(root, 'model');
  const manifestPath = join(root, 'manifest.json');
  const marker = join(root, 'complete');
  const options = { arch: 'llama' as const, sizeBytes: sizeMb * MiB, seed: 1 };
  // The marker holds the config the synthesiser plans today: a model made by an older synthesiser
  // (other dimensions) is made again rather than measured in its place.
  const planned = JSON.stringify(planSynth(options).config) + '\n';
  const made = await readFile(marker, 'utf8').catch(() => undefined);
  if (made === planned) return { dir, manifestPath };
  await rm(root, { recursive: true, force: true });
  await mkdir(root, { recursive: true });
  process.stderr.write(`synthesising a ${sizeMb} MiB llama checkpoint into ${root} (kept for later runs)\n`);
  await synthesizeModel({ dir, ...options });
  const origin = new LocalOrigin(dir);
  await writeManifest(manifestPath, await buildManifest(origin, { pieceSize: PIECE_SIZE_DEFAULT }));
  await origin.close();
  await writeFile(marker, planned);
  return { dir, manifestPath };
}

/** The largest tensor of the model's files, in bytes: what a whole-tensor stream must hold at once. */
async function largestTensorBytes(files: readonly string[]): Promise<number> {
  let largest = 0;
  for (const file of files) {
    for (const tensor of (await readSafetensorsHeaderFromFile(file)).tensors) {
      largest = Math.max(largest, tensor.end - tensor.start);
    }
  }
  return largest;
}

// ---- the table ---------------------------------------------------------------------------------------

function printTable(rows: readonly Row[], catWarm: Measured): void {
  const header = ['what', 'seconds', 'MiB/s', 'x cat warm', 'peak RSS', 'goal', 'met'];
  const lines = rows.map((row) => {
    const m = row.measured;
    if (m === undefined) return [row.what, '-', '-', '-', '-', row.goal, '-'];
    const rate = row.bytes / MiB / m.seconds;
    const ratio = catWarm.seconds / m.seconds;
    return [
      row.what + (m.note === undefined ? '' : ` (${m.note})`),
      m.seconds.toFixed(2),
      rate.toFixed(0),
      ratio.toFixed(2),
      m.peakRssBytes === undefined ? '-' : `${(m.peakRssBytes / MiB).toFixed(0)} MiB`,
      row.goal,
      row.met === undefined ? '' : row.met ? 'yes' : 'no',
    ];
  });
  const widths = header.map((h, i) => Math.max(h.length, ...lines.map((l) => (l[i] ?? '').length)));
  const format = (values: readonly string[]): string =>
    '| ' + values.map((v, i) => v.padEnd(widths[i] ?? 0)).join(' | ') + ' |';
  process.stdout.write(format(header) + '\n');
  process.stdout.write('|' + widths.map((w) => '-'.repeat(w + 2)).join('|') + '|\n');
  for (const line of lines) process.stdout.write(format(line) + '\n');
}

const USAGE =
  'usage: npm run bench:load [-- --size-mb N (4096)] [--memory-mb M (512, at least 128)] [--no-cold] [--only stream|slice]';

interface LoadArgs {
  sizeMb: number;
  memoryMb: number;
  cold: boolean;
  only: 'stream' | 'slice' | undefined;
}

function readLoadArgs(argv: string[]): LoadArgs {
  const { values } = parseArgs({
    args: argv,
    options: {
      'size-mb': { type: 'string' },
      'memory-mb': { type: 'string' },
      'no-cold': { type: 'boolean', default: false },
      only: { type: 'string' },
    },
    strict: true,
  });
  const only = values.only;
  if (only !== undefined && only !== 'stream' && only !== 'slice')
    throw new BenchUsageError(`--only must be stream or slice, not "${only}"`);
  return {
    sizeMb: flagNumber(values['size-mb'], '--size-mb', 4096, { min: 16, max: 1024 * 1024, integer: true }),
    memoryMb: flagNumber(values['memory-mb'], '--memory-mb', 512, {
      min: 128,
      max: 1024 * 1024,
      integer: true,
    }),
    cold: !values['no-cold'],
    only,
  };
}

async function main({ sizeMb, memoryMb, cold }: LoadArgs): Promise<void> {
  const { dir, manifestPath } = await cachedModel(sizeMb);
  const files = (await readdir(dir))
    .filter((n) => n.endsWith('.safetensors'))
    .sort()
    .map((n) => join(dir, n));
  let bytes = 0;
  for (const file of files) bytes += (await stat(file)).size;
  // The goal bounds the whole process; the loader's buffers get what the runtime leaves of it.
  const budgetBytes = memoryMb * MiB;
  const buffersMb = memoryMb - RUNTIME_ALLOWANCE_MB;
  const rssGoal = `peak RSS <= ${memoryMb} MiB`;
  await catFiles(files);
  // Other jobs share the machine: the headline pair (cat and the stream) is the best of a few runs
  // each, taken the same way for both.
  const catWarm = await bestOf(WARM_RUNS, () => catFiles(files));
  const rows: Row[] = [
    { what: `cat > /dev/null, warm, best of ${WARM_RUNS}`, bytes, measured: catWarm, goal: 'baseline' },
  ];
  const sha = await hashFiles('sha256sum', files);
  rows.push({ what: 'sha256sum, warm', bytes, measured: sha, goal: 'baseline (verified)' });
  const openssl = await hashFiles('openssl dgst -sha256', files);
  rows.push({ what: 'openssl dgst -sha256, warm', bytes, measured: openssl, goal: 'baseline (verified)' });
  const parts = `${PART_BYTES / MiB} MiB parts`;
  const stream = await bestOf(WARM_RUNS, () => loaderChild('stream-parts', dir, buffersMb, manifestPath));
  rows.push({
    what: `stream into memory, no manifest, ${parts}, ${buffersMb} MiB budget, best of ${WARM_RUNS}`,
    bytes,
    measured: stream,
    goal: `>= 0.9 x cat; ${rssGoal}`,
    met: catWarm.seconds / stream.seconds >= 0.9 && (stream.peakRssBytes ?? 0) <= budgetBytes,
  });
  // Whole tensors need a window of the largest tensor (the loader refuses a smaller budget with
  // LOADER_TENSOR_TOO_LARGE), which may be more than the parts' budget: this row gets that much.
  const largestMb = Math.ceil((await largestTensorBytes(files)) / MiB);
  const wholeBuffersMb = Math.max(buffersMb, largestMb);
  const wholeBudgetMb = wholeBuffersMb + RUNTIME_ALLOWANCE_MB;
  const whole = await loaderChild('stream', dir, wholeBuffersMb, manifestPath);
  if (wholeBuffersMb > buffersMb) whole.note = `the largest tensor is ${largestMb} MiB`;
  rows.push({
    what: `stream into memory, no manifest, whole tensors, ${wholeBuffersMb} MiB budget`,
    bytes,
    measured: whole,
    goal: `peak RSS <= ${wholeBudgetMb} MiB`,
    met: (whole.peakRssBytes ?? 0) <= wholeBudgetMb * MiB,
  });
  const verified = await loaderChild('stream-verified-parts', dir, buffersMb, manifestPath);
  verified.note =
    `${(sha.seconds / verified.seconds).toFixed(2)} x sha256sum, ` +
    `${(openssl.seconds / verified.seconds).toFixed(2)} x openssl`;
  rows.push({
    what: `stream into memory, SHA-256 verified, ${parts}, ${buffersMb} MiB budget`,
    bytes,
    measured: verified,
    // Against openssl, which hashes with the same SHA instructions Node does; sha256sum is shown too.
    goal: `>= 0.9 x openssl; ${rssGoal}`,
    met: openssl.seconds / verified.seconds >= 0.9 && (verified.peakRssBytes ?? 0) <= budgetBytes,
  });
  const shmTo = join('/dev/shm/weightcast', `bench-load-${process.pid}`);
  const cp = await copyToShm(files, shmTo);
  rows.push({ what: 'cp of the files into /dev/shm', bytes, measured: cp, goal: 'baseline (shm)' });
  const shm = await shmLoad(dir, buffersMb, shmTo);
  rows.push({
    what: `weightcast load --format shm (16 MiB parts), ${buffersMb} MiB budget`,
    bytes,
    measured: shm,
    goal: rssGoal,
    met: (shm.peakRssBytes ?? 0) <= budgetBytes,
  });
  shm.note = `${(cp.seconds / shm.seconds).toFixed(2)} x cp`;
  await rm(shmTo, { recursive: true, force: true });
  const shmParts = await loaderChild('shm-parts', dir, buffersMb, shmTo).finally(() =>
    rm(shmTo, { recursive: true, force: true }),
  );
  rows.push({
    what: `load into shm through the library, ${parts}, ${buffersMb} MiB budget`,
    bytes,
    measured: shmParts,
    goal: rssGoal,
    met: (shmParts.peakRssBytes ?? 0) <= budgetBytes,
  });
  shmParts.note = `${(cp.seconds / shmParts.seconds).toFixed(2)} x cp`;
  rows.push({
    what: 'serial: readFile each file, then parse',
    bytes,
    measured: await loaderChild('serial', dir, memoryMb, manifestPath),
    goal: 'baseline',
  });
  let torchSkipped = '';
  const torchRows = await torchBaselineRows(dir, {
    streamingLoadSeconds: stream.seconds,
    streamingLabel: `stream into memory, no manifest, ${parts}, ${buffersMb} MiB budget, best of ${WARM_RUNS}`,
    onSkip: (reason) => (torchSkipped = reason),
  });
  if (cold) {
    if (await dropCaches()) {
      const catCold = await catFiles(files);
      rows.push({ what: 'cat > /dev/null, cold', bytes, measured: catCold, goal: 'baseline (cold)' });
      await dropCaches();
      const cold = await loaderChild('stream-parts', dir, buffersMb, manifestPath);
      cold.note = `${(catCold.seconds / cold.seconds).toFixed(2)} x cat cold`;
      rows.push({
        what: `stream, no manifest, cold, ${parts}, ${buffersMb} MiB budget`,
        bytes,
        measured: cold,
        goal: '>= 0.9 x cat cold',
        met: catCold.seconds / cold.seconds >= 0.9,
      });
    } else {
      process.stderr.write('cold rows skipped: the page cache cannot be dropped (needs root)\n');
    }
  }
  process.stdout.write(
    `\nmodel: ${files.length} safetensors files, ${(bytes / MiB).toFixed(0)} MiB, in ${dir}\n\n`,
  );
  printTable(rows, catWarm);
  process.stdout.write('\n');
  if (torchRows === null) process.stdout.write(`torch baselines skipped: ${torchSkipped}\n`);
  else printTorchTable(torchRows);
}

function printTorchTable(rows: readonly TorchRow[]): void {
  const show = (row: TorchRow, value: number): string =>
    row.unit === 'bytes' ? `${(value / MiB).toFixed(0)} MiB` : `${(value / MiB).toFixed(0)} MiB/s`;
  printRows(
    ['what', 'value', 'baseline', 'baseline value', 'x baseline', 'goal', 'met', 'note'],
    rows.map((row) => [
      row.what,
      show(row, row.rate),
      row.baseline,
      show(row, row.baselineRate),
      (row.unit === 'bytes' ? row.baselineRate / row.rate : row.rate / row.baselineRate).toFixed(2),
      row.goal,
      row.met === undefined ? '' : row.met ? 'yes' : 'no',
      row.note,
    ]),
  );
}

function printRows(header: readonly string[], lines: ReadonlyArray<readonly string[]>): void {
  const widths = header.map((h, i) => Math.max(h.length, ...lines.map((l) => (l[i] ?? '').length)));
  const format = (values: readonly string[]): string =>
    '| ' + values.map((v, i) => v.padEnd(widths[i] ?? 0)).join(' | ') + ' |';
  process.stdout.write(format(header) + '\n');
  process.stdout.write('|' + widths.map((w) => '-'.repeat(w + 2)).join('|') + '|\n');
  for (const line of lines) process.stdout.write(format(line) + '\n');
}

// ---- slice-aware fetch: bytes per rank, and lazy loading through an agent ---------------------------

/** The per-rank goal with a plan manifest (PRODUCT.md, "rank bytes"). */
const RANK_BYTES_GOAL = 1.02;
const SLICE_MODEL_MB = 48;
const SLICE_PIECE_BYTES = 1024 * 1024;

async function sliceModel(arch: SynthArch): Promise<{ dir: string; manifest: Manifest }> {
  const root = join(tmpdir(), `weightcast-bench-slice-${arch}-${SLICE_MODEL_MB}mb`);
  const dir = join(root, 'model');
  const manifestPath = join(root, 'manifest.json');
  const marker = join(root, 'complete');
  const ready = await stat(marker).then(
    () => true,
    () => false,
  );
  if (!ready) {
    await rm(root, { recursive: true, force: true });
    // 16 heads and 16 experts: every split of tp 8 is even; 4 layers keep it small.
    await synthesizeModel({
      dir,
      arch,
      sizeBytes: SLICE_MODEL_MB * MiB,
      heads: 16,
      layers: 4,
      ...(arch === 'deepseek-v3' ? { experts: 16 } : {}),
      seed: 2,
    });
    const origin = new LocalOrigin(dir);
    await writeManifest(manifestPath, await buildManifest(origin, { pieceSize: SLICE_PIECE_BYTES }));
    await origin.close();
    await writeFile(marker, new Date().toISOString() + '\n');
  }
  return { dir, manifest: await loadManifest(manifestPath) };
}

async function sliceRows(): Promise<string[][]> {
  const lines: string[][] = [];
  for (const arch of ['llama', 'deepseek-v3'] as const) {
    const { dir, manifest } = await sliceModel(arch);
    const source = await readModelDirectory(dir);
    for (const tp of [2, 4, 8]) {
      const plan = buildParallelPlan(source, { tp });
      const planManifest = await buildPlanManifest(source, plan);
      for (const mode of ['plan manifest', 'model manifest only'] as const) {
        let rankBytesSum = 0;
        let fetchedSum = 0;
        let worst = 0;
        let seconds = 0;
        for (let rank = 0; rank < tp; rank++) {
          const to = join(tmpdir(), `weightcast-bench-slice-out-${process.pid}`);
          const options: LoadRankOptions = {
            tp,
            rank,
            to,
            format: 'shm',
            order: 'single',
            ...(mode === 'plan manifest' ? { planManifest } : { manifest }),
          };
          try {
            const result = await loadRank(dir, options);
            const rankBytes = result.sliceBytes + result.replicatedBytes;
            rankBytesSum += rankBytes;
            fetchedSum += result.bytesFetched;
            worst = Math.max(worst, result.bytesFetched / rankBytes);
            seconds += result.seconds;
          } finally {
            await rm(to, { recursive: true, force: true });
          }
        }
        const withPlan = mode === 'plan manifest';
        lines.push([
          `${arch} tp ${tp}, ${mode}`,
          `${(rankBytesSum / tp / MiB).toFixed(2)} MiB`,
          `${(fetchedSum / tp / MiB).toFixed(2)} MiB`,
          `${worst.toFixed(3)} x`,
          `${(plan.modelBytes / (rankBytesSum / tp)).toFixed(2)} x`,
          (seconds / tp).toFixed(2),
          withPlan ? `<= ${RANK_BYTES_GOAL} x` : 'verified by whole pieces',
          withPlan ? (worst <= RANK_BYTES_GOAL ? 'yes' : 'no') : '',
        ]);
      }
    }
  }
  return lines;
}

/**
 * Lazy loading: one agent joins a model it does not hold while a loader reads rank 0 of tp 2 through
 * it; the origin is capped so the swarm fills over seconds. Reports both times and how much of the
 * model the agent held when the first layer was in.
 */
async function lazyRow(): Promise<string[]> {
  const root = join(tmpdir(), `weightcast-bench-lazy-${process.pid}`);
  const dir = join(root, 'model');
  try {
    await synthesizeModel({ dir, arch: 'llama', sizeBytes: 24 * MiB, heads: 16, layers: 16, seed: 4 });
    const origin = new LocalOrigin(dir);
    const manifest = await buildManifest(origin, { pieceSize: 256 * 1024 });
    await origin.close();
    const originMbps = 64;
    const cluster = await Cluster.start({
      modelDir: dir,
      manifest,
      workDir: join(root, 'cluster'),
      hosts: 1,
      originMbps,
    });
    try {
      let held: AgentStatus | undefined;
      const result = await loadRank(cluster.originUrl, {
        tp: 2,
        rank: 0,
        to: join(root, 'rank0'),
        format: 'shm',
        manifest,
        agentUrl: cluster.agentUrl(0),
        onEvent: async (event) => {
          if (event.type === 'first-layer') held = await cluster.status(0);
        },
      });
      const share = held === undefined ? NaN : (100 * held.held) / held.pieceCount;
      return [
        `llama 16 layers, 24 MiB, tp 2 rank 0 via agent, origin ${originMbps} Mbit/s`,
        (result.firstLayerSeconds ?? NaN).toFixed(2),
        result.seconds.toFixed(2),
        `${share.toFixed(0)}%`,
        'first layer well before the rank',
      ];
    } finally {
      await cluster.close();
    }
  } finally {
    await rm(root, { recursive: true, force: true });
  }
}

async function sliceMain(): Promise<void> {
  process.stdout.write(
    '\nslice-aware fetch: bytes fetched per rank (mean over the ranks; worst rank ratio)\n\n',
  );
  printRows(
    [
      'layout',
      'rank bytes (slice + replicated)',
      'fetched',
      'worst fetched / rank bytes',
      'naive (whole model) / rank bytes',
      's per rank',
      'goal',
      'met',
    ],
    await sliceRows(),
  );
  process.stdout.write('\nlazy loading through a filling agent\n\n');
  printRows(
    ['what', 'first layer s', 'whole rank s', 'agent held at first layer', 'goal'],
    [await lazyRow()],
  );
}

const childAt = process.argv.indexOf('--child');
if (childAt >= 0) {
  const [kind, dir, memoryMb, manifestPath] = process.argv.slice(childAt + 1);
  await childMain(kind ?? '', dir ?? '', Number(memoryMb), manifestPath ?? '');
} else {
  const args = readBenchArgs('bench:load', USAGE, readLoadArgs);
  if (args !== undefined && args.only !== 'slice') await main(args);
  if (args !== undefined && args.only !== 'stream') await sliceMain();
}
