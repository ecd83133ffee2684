/**
 * `npm run bench`: the foundation's speed and memory, each row next to a baseline measured in the
 * same run on the same files (warm page cache):
 *   - manifest hashing vs `sha256sum` and vs cores x the single-thread SHA-256 rate of this process;
 *   - pull from a local HTTP origin (a separate process) vs `curl` fetching the same files;
 *   - pull from a local path vs `cp`;
 *   - peak RSS of a pull of the whole model (4 GiB by default) at default settings.
 * Options: --size-mb N (default 4096), --keep. Prints a table; writes nothing outside a temp dir
 * (removed at the end, also on Ctrl-C, unless --keep).
 */

import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { availableParallelism, cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { buildManifest } from '../src/manifest/build.js';
import { writeManifest } from '../src/manifest/manifest.js';
import { LocalOrigin } from '../src/origin/local.js';
import { synthesizeModel } from '../src/synth/synth.js';
import { formatBytes, formatSeconds } from '../src/util/units.js';
import { flagNumber, readBenchArgs, removedOnAbruptEnd } from './bench-args.js';
import type { Row } from './torch-baseline.js';

const BIN = fileURLToPath(new URL('../../bin/weightcast.js', import.meta.url));
const FILE_SERVER = fileURLToPath(new URL('../src/origin/file-server-main.js', import.meta.url));
const MiB = 1024 * 1024;

function run(
  command: string,
  args: readonly string[],
): Promise<{ seconds: number; stdout: string; stderr: string }> {
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
      if (code === 0) resolve({ seconds, stdout, stderr });
      else reject(new Error(`${command} ${args.join(' ')} exited ${code}: ${stderr.slice(-2000)}`));
    });
  });
}

function singleThreadSha256Rate(): number {
  const buffer = Buffer.alloc(256 * MiB, 0x5a);
  createHash('sha256')
    .update(buffer.subarray(0, 16 * MiB))
    .digest();
  let best = 0;
  for (let i = 0; i < 3; i++) {
    const started = performance.now();
    createHash('sha256').update(buffer).digest();
    best = Math.max(best, buffer.length / ((performance.now() - started) / 1000));
  }
  return best;
}

async function startOriginProcess(root: string): Promise<{ url: string; stop: () => Promise<void> }> {
  const child = spawn(process.execPath, [FILE_SERVER, '--root', root], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const url = await new Promise<string>((resolve, reject) => {
    let text = '';
    child.stdout.on('data', (chunk: Buffer) => {
      text += chunk.toString();
      const line = text.split('\n')[0];
      if (text.includes('\n') && line !== undefined) resolve((JSON.parse(line) as { url: string }).url);
    });
    child.once('exit', (code) => reject(new Error(`file server exited ${code}`)));
  });
  const stop = (): Promise<void> =>
    new Promise((resolve) => {
      child.once('exit', () => resolve());
      child.kill('SIGTERM');
    });
  return { url, stop };
}

interface PullSummary {
  seconds: number;
  bytesFetched: number;
  peakRssBytes: number;
}

async function weightcastPull(source: string, dest: string, manifestPath: string): Promise<PullSummary> {
  const { stdout } = await run(process.execPath, [
    BIN,
    'pull',
    source,
    '--to',
    dest,
    '--manifest',
    manifestPath,
    '--json',
  ]);
  const done = stdout
    .trim()
    .split('\n')
    .map((line) => JSON.parse(line) as Record<string, unknown>)
    .find((event) => event['event'] === 'done');
  if (done === undefined || done['verified'] !== true)
    throw new Error(`pull did not verify: ${stdout.slice(-2000)}`);
  return done as unknown as PullSummary;
}

function printTable(rows: readonly Row[]): void {
  const show = (row: Row, value: number): string =>
    row.unit === 'bytes' ? formatBytes(value) : `${(value / MiB).toFixed(0)} MiB/s`;
  const header = ['what', 'baseline', 'baseline', 'weightcast', 'ratio', 'goal', 'met', 'note'];
  const cells = rows.map((r) => [
    r.what,
    r.baseline,
    show(r, r.baselineRate),
    show(r, r.rate),
    (r.rate / r.baselineRate).toFixed(2),
    r.goal,
    r.met === undefined ? '' : r.met ? 'yes' : 'NO',
    r.note,
  ]);
  const widths = header.map((h, i) => Math.max(h.length, ...cells.map((c) => (c[i] ?? '').length)));
  const line = (values: string[]): string =>
    '| ' + values.map((v, i) => v.padEnd(widths[i] ?? 0)).join(' | ') + ' |';
  console.log(line(header));
  console.log('|' + widths.map((w) => '-'.repeat(w + 2)).join('|') + '|');
  for (const c of cells) console.log(line(c));
}

const USAGE = 'usage: npm run bench [-- --size-mb N (4096, at least 16)] [--keep (the temporary directory)]';

async function main(): Promise<void> {
  const args = readBenchArgs('bench', USAGE, (argv) => {
    const { values } = parseArgs({
      args: argv,
      options: { 'size-mb': { type: 'string' }, keep: { type: 'boolean', default: false } },
      strict: true,
    });
    const sizeMb = flagNumber(values['size-mb'], '--size-mb', 4096, {
      min: 16,
      max: 1024 * 1024,
      integer: true,
    });
    return { sizeMb, keep: values.keep };
  });
  if (args === undefined) return;
  const { sizeMb, keep } = args;
  const work = await mkdtemp(join(tmpdir(), 'weightcast-bench-'));
  // With --keep the directory stays, also when the run is cut short.
  const disarmCleanup = keep ? () => undefined : removedOnAbruptEnd(work);
  const modelDir = join(work, 'model');
  const cores = availableParallelism();
  console.log(
    `machine: ${cores} cores (${cpus()[0]?.model ?? 'unknown cpu'}), node ${process.version}; warm page cache`,
  );
  const rows: Row[] = [];
  try {
    const model = await synthesizeModel({ dir: modelDir, arch: 'llama', sizeBytes: sizeMb * MiB, seed: 7 });
    const files = model.files.map((f) => join(modelDir, f.path));
    const bytes = model.totalBytes;
    console.log(`model: synthetic llama, ${model.files.length} files, ${formatBytes(bytes)}\n`);
    await run('sh', ['-c', 'cat "$@" > /dev/null', 'sh', ...files]); // warm the page cache

    const single = singleThreadSha256Rate();
    const local = new LocalOrigin(modelDir);
    const started = performance.now();
    const manifest = await buildManifest(local, {});
    const manifestRate = bytes / ((performance.now() - started) / 1000);
    const startedWhole = performance.now();
    await buildManifest(local, { fileSha256: true });
    const wholeRate = bytes / ((performance.now() - startedWhole) / 1000);
    await local.close();
    const manifestPath = join(work, 'manifest.json');
    await writeManifest(manifestPath, manifest);
    const shaSum = await run('sha256sum', files);
    const shaSumParallel = await run('sh', [
      '-c',
      `printf '%s\\0' "$@" | xargs -0 -n 1 -P ${cores} sha256sum`,
      'sh',
      ...files,
    ]);
    rows.push(
      {
        what: 'manifest (pieces + Merkle)',
        baseline: `${cores} cores x 1-thread SHA-256`,
        baselineRate: cores * single,
        rate: manifestRate,
        goal: '>= 0.85',
        met: manifestRate >= 0.85 * cores * single,
        note: `1 thread: ${(single / MiB).toFixed(0)} MiB/s`,
      },
      {
        what: 'manifest (pieces + Merkle)',
        baseline: 'sha256sum, 1 process',
        baselineRate: bytes / shaSum.seconds,
        rate: manifestRate,
        goal: '',
        met: undefined,
        note: '',
      },
      {
        what: 'manifest (pieces + Merkle)',
        baseline: `sha256sum x ${cores} (xargs -P)`,
        baselineRate: bytes / shaSumParallel.seconds,
        rate: manifestRate,
        goal: '',
        met: undefined,
        note: '',
      },
      {
        what: 'manifest --file-sha256',
        baseline: `${cores} cores x 1-thread SHA-256`,
        baselineRate: cores * single,
        rate: wholeRate,
        goal: '',
        met: undefined,
        note: 'hashes every byte twice',
      },
    );

    const origin = await startOriginProcess(modelDir);
    try {
      const curlDir = join(work, 'curl');
      const curlArgs = ['-s', '-f', '--create-dirs'];
      for (const f of model.files) curlArgs.push('-o', join(curlDir, f.path), origin.url + f.path);
      const curl = await run('curl', curlArgs);
      await rm(curlDir, { recursive: true, force: true });
      const httpPull = await weightcastPull(origin.url, join(work, 'pull-http'), manifestPath);
      await rm(join(work, 'pull-http'), { recursive: true, force: true });
      rows.push({
        what: 'pull, local HTTP origin, verified',
        baseline: 'curl, same files',
        baselineRate: bytes / curl.seconds,
        rate: bytes / httpPull.seconds,
        goal: '>= 1.0',
        met: httpPull.seconds <= curl.seconds,
        note: `curl ${formatSeconds(curl.seconds)}, pull ${formatSeconds(httpPull.seconds)}`,
      });
      const rssGoalBytes = 300 * 1000 * 1000;
      rows.push({
        what: `pull peak RSS, ${formatBytes(bytes)} model`,
        baseline: 'the goal: 300 MB',
        baselineRate: rssGoalBytes,
        rate: httpPull.peakRssBytes,
        goal: '<= 1.0',
        met: httpPull.peakRssBytes <= rssGoalBytes,
        note: 'default settings: 4 lanes x 16 MiB pieces',
        unit: 'bytes',
      });
    } finally {
      await origin.stop();
    }

    const cp = await run('cp', ['-r', modelDir, join(work, 'cp')]);
    await rm(join(work, 'cp'), { recursive: true, force: true });
    const localPull = await weightcastPull(modelDir, join(work, 'pull-local'), manifestPath);
    await rm(join(work, 'pull-local'), { recursive: true, force: true });
    rows.push({
      what: 'pull, local path, verified',
      baseline: 'cp -r',
      baselineRate: bytes / cp.seconds,
      rate: bytes / localPull.seconds,
      goal: '',
      met: undefined,
      note: `cp ${formatSeconds(cp.seconds)}, pull ${formatSeconds(localPull.seconds)}`,
    });
    printTable(rows);
  } finally {
    if (keep) console.log(`kept ${work}`);
    else await rm(work, { recursive: true, force: true });
    disarmCleanup();
  }
}

await main();
