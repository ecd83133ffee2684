/**
 * A disk without room for a model: a destination or cache too small for it is refused before a
 * byte is written (IO, naming both sizes), and a disk that fills up while the model arrives (another
 * writer took the room) stops that model (or a pull from the origin) with a typed error, reported to
 * the user, instead of fetching the same pieces again and again. The disks are small tmpfs mounts
 * made for the test (root only; skipped with a message otherwise), so writes fail with a real ENOSPC.
 */

import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdir, open, readFile, readdir, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import { manifestDigest, type Manifest } from '../../src/manifest/manifest.js';
import { startFileServer, type FileServer } from '../../src/origin/file-server.js';
import { Agent } from '../../src/swarm/agent/agent.js';
import { startScheduler, type SchedulerServer } from '../../src/swarm/scheduler/scheduler-server.js';
import { swarmPull } from '../../src/swarm/swarm-pull.js';
import { synthesizeModel } from '../../src/synth/synth.js';
import { failingCli } from '../helpers/cli.js';
import { tempDir, smallModelWithManifest } from '../helpers/fixtures.js';

const run = promisify(execFile);
const isRoot = process.getuid?.() === 0;
const skip = isRoot ? false : 'needs root to mount a small tmpfs (a real full disk)';
if (!isRoot) console.log(`# disk-full tests skipped: ${skip}`);

/** The up-front refusal's words. */
const NO_ROOM =
  /IO: not enough free space for the model in .*: it needs [\d.]+ [KM]iB, the file system has [\d.]+ KiB free; nothing was written/;

let work: { path: string; cleanup: () => Promise<void> };
let small: string;
let roomy: string;
const mounts: string[] = [];
let manifest: Manifest;
let manifestPath: string;
let origin: FileServer;
/** The same model sent at 256 KiB/s: a pull takes seconds, time for the disk to fill under it. */
let slowOrigin: FileServer;
let scheduler: SchedulerServer;

before(async () => {
  work = await tempDir('disk-full');
  const fixture = await smallModelWithManifest(work.path);
  const { modelDir } = fixture;
  ({ manifest, manifestPath } = fixture);
  origin = await startFileServer({ root: modelDir });
  slowOrigin = await startFileServer({ root: modelDir, rateBytesPerSecond: 256 * 1024 });
  scheduler = await startScheduler();
  if (isRoot) {
    // A quarter of the model fits.
    small = join(work.path, 'small');
    // The model fits, until something else fills the disk.
    roomy = join(work.path, 'roomy');
    for (const [dir, size] of [
      [small, '256k'],
      [roomy, '4m'],
    ] as const) {
      await mkdir(dir);
      await run('mount', ['-t', 'tmpfs', '-o', `size=${size}`, 'tmpfs', dir]);
      mounts.push(dir);
    }
  }
});

after(async () => {
  await origin.close();
  await slowOrigin.close();
  await scheduler.close();
  for (const dir of mounts) await run('umount', [dir]);
  await work.cleanup();
});

/**
 * Once `server` has sent `bytes`, takes every free byte of the file system under `dir` with a file
 * of its own (as another writer on the host would), so the writes still to come fail with ENOSPC.
 */
async function fillOnceSent(server: FileServer, bytes: number, dir: string): Promise<void> {
  for (let i = 0; i < 2000 && server.stats.bytesSent < bytes; i++)
    await new Promise((resolve) => setTimeout(resolve, 5));
  assert.ok(server.stats.bytesSent >= bytes, 'the transfer began');
  const filler = await open(join(dir, 'filler'), 'w');
  try {
    const block = Buffer.alloc(64 * 1024, 1);
    for (let i = 0; i < 1000; i++) {
      const written = await filler.write(block).catch((error: NodeJS.ErrnoException) => error);
      if (written instanceof Error) {
        assert.equal(written.code, 'ENOSPC');
        return;
      }
    }
    assert.fail('the disk never filled');
  } finally {
    await filler.close();
  }
}

function pieceCount(): number {
  return manifest.files.reduce((sum, file) => sum + file.pieces.length, 0);
}

describe('a destination too small for the model', { skip, timeout: 60_000 }, () => {
  it('refuses a pull from the origin before fetching a piece, naming both sizes; leaves nothing', async () => {
    const dest = join(small, 'plain');
    const sentBefore = origin.stats.bytesSent;
    const failed = await failingCli([
      'pull',
      origin.url,
      '--to',
      dest,
      '--manifest',
      manifestPath,
      '--no-agent',
    ]);
    assert.equal(failed.code, 1, failed.stderr);
    assert.match(failed.stderr ?? '', NO_ROOM);
    assert.equal(origin.stats.bytesSent, sentBefore, 'no byte of the model was sent');
    assert.deepEqual(await readdir(small), [], 'no folder left behind');
  });

  it('refuses pull --scheduler the same way', async () => {
    await assert.rejects(
      swarmPull(origin.url, join(small, 'in-process'), {
        manifest,
        schedulerUrl: scheduler.url,
        signal: AbortSignal.timeout(30_000),
      }),
      (error: unknown) => {
        assert.equal((error as { code?: string }).code, 'IO');
        assert.match(`IO: ${(error as Error).message}`, NO_ROOM);
        return true;
      },
    );
    assert.deepEqual(await readdir(small), [], 'no folder left behind');
  });

  it('through an agent: refused as soon as the agent joins, and the agent goes on filling its cache', async () => {
    const agent = await Agent.start({
      schedulerUrl: scheduler.url,
      cacheDir: join(work.path, 'cache-refused'),
      destinationRoots: [work.path],
    });
    try {
      const failed = await failingCli(
        ['pull', origin.url, '--to', join(small, 'through-agent'), '--manifest', manifestPath],
        {
          ...process.env,
          WEIGHTCAST_AGENT: agent.url,
        },
      );
      assert.equal(failed.code, 1, failed.stderr);
      assert.match(failed.stderr ?? '', NO_ROOM);
      assert.match(failed.stderr ?? '', /goes on fetching the model into its cache/);
      const hex = manifestDigest(manifest).slice('sha256:'.length);
      await agent.whenComplete(hex);
      assert.equal(agent.status(hex).failed, undefined);
    } finally {
      await agent.close();
    }
  });
});

describe('a load or pre-shard output too small for its files', { skip, timeout: 60_000 }, () => {
  it('is refused before a byte is written: a rank of load (hf, sharded-state) and preshard', async () => {
    const model = join(work.path, 'synth');
    await synthesizeModel({ dir: model, arch: 'llama', sizeBytes: 4 * 1024 * 1024, seed: 3 });
    for (const args of [
      ['load', model, '--tp', '2', '--rank', '0', '--format', 'hf', '--to', join(small, 'rank-hf')],
      [
        'load',
        model,
        '--tp',
        '2',
        '--rank',
        '0',
        '--format',
        'sharded-state',
        '--to',
        join(small, 'rank-ss'),
      ],
      ['preshard', model, '--tp', '2', '--to', join(small, 'preshard')],
    ]) {
      const failed = await failingCli(args);
      assert.equal(failed.code, 1, `${args[0]}: ${failed.stderr}`);
      assert.match(failed.stderr ?? '', NO_ROOM, args.join(' '));
    }
    assert.deepEqual(await readdir(small), [], 'nothing written');
  });
});

describe('a disk that fills under a pull from the origin', { skip, timeout: 60_000 }, () => {
  it('fails with IO (ENOSPC), exit 1, after a bounded number of requests, no file half there', async () => {
    const dest = join(roomy, 'plain');
    const requestsBefore = slowOrigin.stats.requests;
    const pulling = failingCli([
      'pull',
      slowOrigin.url,
      '--to',
      dest,
      '--manifest',
      manifestPath,
      '--no-agent',
    ]);
    await fillOnceSent(slowOrigin, slowOrigin.stats.bytesSent + 128 * 1024, roomy);
    const failed = await pulling;
    assert.equal(failed.code, 1, failed.stderr);
    assert.match(failed.stderr ?? '', /IO: .*(ENOSPC|no space)/i);
    const pieces = pieceCount();
    const requests = slowOrigin.stats.requests - requestsBefore;
    assert.ok(requests <= 2 * pieces, `${requests} origin requests for ${pieces} pieces`);
    // A file under its final name is the whole file: the ones that fit, if any, and no other.
    for (const file of manifest.files) {
      const there = await readFile(join(dest, file.path)).catch(() => undefined);
      if (there !== undefined)
        assert.deepEqual(there, await readFile(join(work.path, 'origin', file.path)), file.path);
    }
    // The partial files stay for a resume; the next tests need the room.
    await rm(dest, { recursive: true, force: true });
    await rm(join(roomy, 'filler'));
  });
});

describe('a disk that fills on the swarm path', { skip, timeout: 60_000 }, () => {
  it('fails pull --scheduler with IO (ENOSPC) after a bounded number of tries', async () => {
    const dest = join(roomy, 'in-process');
    const pulling = assert.rejects(
      swarmPull(slowOrigin.url, dest, {
        manifest,
        schedulerUrl: scheduler.url,
        signal: AbortSignal.timeout(30_000),
      }),
      (error: unknown) => {
        assert.equal((error as { code?: string }).code, 'IO');
        assert.match((error as Error).message, /ENOSPC|no space/i);
        return true;
      },
    );
    await fillOnceSent(slowOrigin, slowOrigin.stats.bytesSent + 128 * 1024, roomy);
    await pulling;
    await rm(dest, { recursive: true, force: true });
    await rm(join(roomy, 'filler'));
  });

  it('stops the model in the agent, tells the pull, and joins afresh when asked again', async () => {
    const agent = await Agent.start({
      schedulerUrl: scheduler.url,
      cacheDir: join(work.path, 'cache'),
      destinationRoots: [work.path],
    });
    try {
      const dest = join(roomy, 'through-agent');
      const requestsBefore = slowOrigin.stats.requests;
      const pulling = failingCli(['pull', slowOrigin.url, '--to', dest, '--manifest', manifestPath], {
        ...process.env,
        WEIGHTCAST_AGENT: agent.url,
      });
      await fillOnceSent(slowOrigin, slowOrigin.stats.bytesSent + 128 * 1024, roomy);
      const failed = await pulling;
      assert.equal(failed.code, 1, failed.stderr);
      assert.match(failed.stderr ?? '', /IO: .*(ENOSPC|no space)/i);
      const hex = manifestDigest(manifest).slice('sha256:'.length);
      const status = agent.status(hex);
      assert.equal(status.failed?.code, 'IO');
      // One failed write stops the model: no storm of requests for pieces that cannot be kept
      // (before, the agent fetched the same pieces again and again, thousands of requests).
      const pieces = pieceCount();
      const requests = slowOrigin.stats.requests - requestsBefore;
      assert.ok(requests <= 2 * pieces, `${requests} origin requests for ${pieces} pieces`);
      // Asked again, the agent tries again (the disk may have room by now; here it still has none,
      // which its store now sees before it writes).
      await assert.rejects(agent.join({ source: slowOrigin.url, manifest, to: dest }), (error: unknown) => {
        assert.equal((error as { code?: string }).code, 'IO');
        assert.match((error as Error).message, /not enough free space/);
        return true;
      });
    } finally {
      await agent.close();
    }
  });
});
