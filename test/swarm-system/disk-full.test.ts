/**
 * A disk that cannot take a model's pieces stops that model (or a pull from the origin) with a
 * typed error, reported to the user, instead of fetching the same pieces again and again. The disk
 * is a small tmpfs mounted for the test (root only; skipped with a message otherwise), so the write
 * fails with a real ENOSPC.
 */

import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdir, readFile, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import { manifestDigest, type Manifest } from '../../src/manifest/manifest.js';
import { startFileServer, type FileServer } from '../../src/origin/file-server.js';
import { Agent } from '../../src/swarm/agent/agent.js';
import { startScheduler, type SchedulerServer } from '../../src/swarm/scheduler/scheduler-server.js';
import { swarmPull } from '../../src/swarm/swarm-pull.js';
import { CLI } from '../../scripts/cluster.js';
import { tempDir, smallModelWithManifest } from '../helpers/fixtures.js';

const run = promisify(execFile);
const isRoot = process.getuid?.() === 0;
const skip = isRoot ? false : 'needs root to mount a small tmpfs (a real full disk)';
if (!isRoot) console.log(`# disk-full tests skipped: ${skip}`);

let work: { path: string; cleanup: () => Promise<void> };
let small: string;
let mounted = false;
let manifest: Manifest;
let manifestPath: string;
let origin: FileServer;
let scheduler: SchedulerServer;

before(async () => {
  work = await tempDir('disk-full');
  const fixture = await smallModelWithManifest(work.path);
  const { modelDir } = fixture;
  ({ manifest, manifestPath } = fixture);
  origin = await startFileServer({ root: modelDir });
  scheduler = await startScheduler();
  if (isRoot) {
    small = join(work.path, 'small');
    await mkdir(small);
    // A quarter of the model fits; the rest of the writes fail with ENOSPC.
    await run('mount', ['-t', 'tmpfs', '-o', 'size=256k', 'tmpfs', small]);
    mounted = true;
  }
});

after(async () => {
  await origin.close();
  await scheduler.close();
  if (mounted) await run('umount', [small]);
  await work.cleanup();
});

describe('a full disk under a pull from the origin', { skip, timeout: 60_000 }, () => {
  it('fails with IO (ENOSPC), exit 1, after a bounded number of requests, no file half there', async () => {
    const dest = join(small, 'plain');
    const requestsBefore = origin.stats.requests;
    const failed = await run(
      process.execPath,
      [CLI, 'pull', origin.url, '--to', dest, '--manifest', manifestPath, '--no-agent'],
      { timeout: 30_000 },
    ).then(
      () => assert.fail('the pull should fail'),
      (error: { code?: number; stderr?: string }) => error,
    );
    assert.equal(failed.code, 1, failed.stderr);
    assert.match(failed.stderr ?? '', /IO: .*(ENOSPC|no space)/i);
    const pieces = manifest.files.reduce((sum, file) => sum + file.pieces.length, 0);
    const requests = origin.stats.requests - requestsBefore;
    assert.ok(requests <= 2 * pieces, `${requests} origin requests for ${pieces} pieces`);
    // A file under its final name is the whole file: the ones that fit, if any, and no other.
    for (const file of manifest.files) {
      const there = await readFile(join(dest, file.path)).catch(() => undefined);
      if (there !== undefined)
        assert.deepEqual(there, await readFile(join(work.path, 'origin', file.path)), file.path);
    }
    // The partial files stay for a resume; the next tests need the room.
    await rm(dest, { recursive: true, force: true });
  });
});

describe('a full disk on the swarm path', { skip, timeout: 60_000 }, () => {
  it('fails pull --scheduler with IO (ENOSPC) after a bounded number of tries', async () => {
    await assert.rejects(
      swarmPull(origin.url, join(small, 'in-process'), {
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
  });

  it('stops the model in the agent, tells the pull, and joins afresh when asked again', async () => {
    const agent = await Agent.start({
      schedulerUrl: scheduler.url,
      cacheDir: join(work.path, 'cache'),
      destinationRoots: [work.path],
    });
    try {
      const dest = join(small, 'through-agent');
      const requestsBefore = origin.stats.requests;
      const failed = await run(
        process.execPath,
        [CLI, 'pull', origin.url, '--to', dest, '--manifest', manifestPath],
        {
          env: { ...process.env, WEIGHTCAST_AGENT: agent.url },
          timeout: 30_000,
        },
      ).then(
        () => assert.fail('the pull should fail'),
        (error: { code?: number; stderr?: string }) => error,
      );
      assert.equal(failed.code, 1, failed.stderr);
      assert.match(failed.stderr ?? '', /IO: .*(ENOSPC|no space)/i);
      const hex = manifestDigest(manifest).slice('sha256:'.length);
      const status = agent.status(hex);
      assert.equal(status.failed?.code, 'IO');
      // One failed write stops the model: no storm of requests for pieces that cannot be kept
      // (before, the agent fetched the same pieces again and again, thousands of requests).
      const pieces = manifest.files.reduce((sum, file) => sum + file.pieces.length, 0);
      const requests = origin.stats.requests - requestsBefore;
      assert.ok(requests <= 2 * pieces, `${requests} origin requests for ${pieces} pieces`);
      // Asked again, the agent tries again (the disk may have room by now; here it still has none).
      await agent.join({ source: origin.url, manifest, to: dest });
      await assert.rejects(agent.whenComplete(hex), { code: 'IO' });
    } finally {
      await agent.close();
    }
  });
});
