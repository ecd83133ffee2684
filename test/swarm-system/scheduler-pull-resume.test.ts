/**
 * `pull --scheduler` killed with SIGKILL part-way: the pull is a process of the CLI running its own
 * swarm member against a scheduler, the origin a file server slowed by its rate cap so the kill lands
 * mid-pull. At the kill, every file under its final name is complete and equal to the origin's; the
 * same command run again finishes with an identical copy, and the origin is asked for no byte range
 * covering a piece the first run had journalled.
 */

import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { stat } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { CLI } from '../../scripts/cluster.js';
import { buildManifest } from '../../src/manifest/build.js';
import { writeManifest, type Manifest } from '../../src/manifest/manifest.js';
import { startFileServer, type FaultRequest, type FileServer } from '../../src/origin/file-server.js';
import { LocalOrigin } from '../../src/origin/local.js';
import { readJournal, type JournalRecord } from '../../src/piece/journal.js';
import { startScheduler, type SchedulerServer } from '../../src/swarm/scheduler/scheduler-server.js';
import { synthesizeModel } from '../../src/synth/synth.js';
import { sameFiles, tempDir } from '../helpers/fixtures.js';

const PIECE = 64 * 1024;
/** Slow enough that the first run is killed long before it ends (the model is about 2 MiB). */
const ORIGIN_BYTES_PER_SECOND = 384 * 1024;
const JOURNALLED_BEFORE_KILL = 6;
const WAIT_MS_MAX = 20_000;

let work: { path: string; cleanup: () => Promise<void> };
let modelDir: string;
let manifest: Manifest;
let manifestPath: string;
let scheduler: SchedulerServer;
let server: FileServer;
/** Called with every request the origin receives. */
let onRequest: ((request: FaultRequest) => void) | undefined;

before(async () => {
  work = await tempDir('scheduler-pull-resume');
  modelDir = join(work.path, 'origin');
  await synthesizeModel({
    dir: modelDir,
    arch: 'llama',
    dtype: 'bf16',
    sizeBytes: 2 << 20,
    shards: 2,
    seed: 11,
  });
  const local = new LocalOrigin(modelDir);
  manifest = await buildManifest(local, { pieceSize: PIECE }).finally(() => local.close());
  manifestPath = join(work.path, 'manifest.json');
  await writeManifest(manifestPath, manifest);
  scheduler = await startScheduler();
  server = await startFileServer({
    root: modelDir,
    rateBytesPerSecond: ORIGIN_BYTES_PER_SECOND,
    faults: (request) => {
      onRequest?.(request);
      return undefined;
    },
  });
});

after(async () => {
  await server?.close();
  await scheduler?.close();
  await work.cleanup();
});

interface PullProcess {
  child: ChildProcess;
  /** What it printed so far, stdout then stderr. */
  output: { stdout: string; stderr: string };
}

function startPull(dest: string): PullProcess {
  const args = ['pull', server.url, '--to', dest, '--manifest', manifestPath, '--scheduler', scheduler.url];
  const child = spawn(process.execPath, [CLI, ...args, '--json'], { stdio: ['ignore', 'pipe', 'pipe'] });
  const output = { stdout: '', stderr: '' };
  child.stdout?.on('data', (chunk: Buffer) => (output.stdout += chunk.toString()));
  child.stderr?.on('data', (chunk: Buffer) => (output.stderr += chunk.toString()));
  return { child, output };
}

/** Waits (bounded) for a child this test started to exit; kills it by PID if it does not. */
async function exitOf(
  child: ChildProcess,
  ms: number,
): Promise<{ code: number | null; signal: string | null }> {
  const exited = once(child, 'exit') as Promise<[number | null, string | null]>;
  const result = await Promise.race([exited, sleep(ms, undefined, { ref: false })]);
  if (result === undefined) {
    child.kill('SIGKILL');
    await exited;
    assert.fail(`pid ${child.pid} did not exit within ${ms} ms`);
  }
  return { code: result[0], signal: result[1] };
}

/** Every piece (as `file:piece`) an origin GET asks bytes of. */
function piecesAsked(request: FaultRequest): string[] {
  const file = manifest.files.findIndex((f) => f.path === request.path);
  const size = manifest.files[file]?.size ?? 0;
  if (request.method !== 'GET' || file < 0 || size === 0) return [];
  const { start, end } = request.range ?? { start: 0, end: size - 1 };
  const pieces: string[] = [];
  for (let piece = Math.floor(start / PIECE); piece <= Math.floor(end / PIECE); piece++)
    pieces.push(`${file}:${piece}`);
  return pieces;
}

const exists = async (path: string): Promise<boolean> =>
  (await stat(path).catch(() => undefined)) !== undefined;

describe('pull --scheduler killed with SIGKILL', { timeout: 60_000 }, () => {
  it('leaves only complete files at final names, and its rerun fetches no journalled piece again', async () => {
    const dest = join(work.path, 'dest');
    const journalPath = join(dest, '.weightcast', 'swarm', 'journal');
    const pieceCount = manifest.files.reduce((sum, file) => sum + file.pieces.length, 0);

    const first = startPull(dest);
    let journalled: JournalRecord[] = [];
    const deadline = performance.now() + WAIT_MS_MAX;
    while (journalled.length < JOURNALLED_BEFORE_KILL && performance.now() < deadline) {
      await sleep(25);
      journalled = await readJournal(journalPath);
    }
    first.child.kill('SIGKILL');
    assert.equal((await exitOf(first.child, 5000)).signal, 'SIGKILL', first.output.stderr);
    // What the journal holds once the process is gone is all the first run had verified.
    journalled = await readJournal(journalPath);
    assert.ok(journalled.length >= JOURNALLED_BEFORE_KILL, `${journalled.length} pieces journalled`);
    assert.ok(journalled.length < pieceCount, `the kill came after all ${pieceCount} pieces`);

    // At the kill, a file under its final name is a whole, verified file.
    const atFinalNames: string[] = [];
    for (const file of manifest.files) {
      if (!(await exists(join(dest, file.path)))) continue;
      atFinalNames.push(file.path);
      assert.ok(await sameFiles(modelDir, dest, [file.path]), `${file.path} at its final name differs`);
    }
    assert.ok(atFinalNames.length < manifest.files.length, 'every file was in place at the kill');

    const asked = new Set<string>();
    onRequest = (request) => piecesAsked(request).forEach((piece) => asked.add(piece));
    try {
      const second = startPull(dest);
      const { code } = await exitOf(second.child, WAIT_MS_MAX);
      const { stdout, stderr } = second.output;
      assert.equal(code, 0, stderr + stdout);
      const done = JSON.parse(stdout.trim().split('\n').pop() ?? '{}') as Record<string, unknown>;
      assert.equal(done['event'], 'done', stdout);
      assert.ok(Number(done['piecesReused']) >= journalled.length, stdout);
    } finally {
      onRequest = undefined;
    }
    assert.ok(
      await sameFiles(
        modelDir,
        dest,
        manifest.files.map((file) => file.path),
      ),
      'the copy differs from the origin',
    );
    const again = journalled.map((r) => `${r.file}:${r.piece}`).filter((piece) => asked.has(piece));
    assert.deepEqual(again, [], 'journalled pieces the rerun asked the origin for');
    // The origin is the only source here: the rerun asked it for every other piece.
    assert.equal(asked.size, pieceCount - journalled.length, [...asked].join(' '));
  });
});
