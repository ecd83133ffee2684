/**
 * A pull into a read-only file system says so (EROFS), where Node's recursive mkdir reports only
 * ENOENT for a level it could not make. The file system is a small tmpfs mounted read-only for the
 * test (root only; skipped with a message otherwise) and unmounted whatever happens.
 */

import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import { startScheduler, type SchedulerServer } from '../../src/swarm/scheduler/scheduler-server.js';
import { CLI } from '../../scripts/cluster.js';
import { tempDir, smallModelWithManifest } from '../helpers/fixtures.js';

const run = promisify(execFile);
const isRoot = process.getuid?.() === 0;
const skip = isRoot ? false : 'needs root to mount a read-only tmpfs';
if (!isRoot) console.log(`# read-only destination tests skipped: ${skip}`);

let work: { path: string; cleanup: () => Promise<void> };
let modelDir: string;
let manifestPath: string;
let readOnly: string;
let mounted = false;
let scheduler: SchedulerServer | undefined;

before(async () => {
  work = await tempDir('read-only-destination');
  const fixture = await smallModelWithManifest(work.path);
  ({ modelDir, manifestPath } = fixture);
  if (!isRoot) return;
  scheduler = await startScheduler();
  readOnly = join(work.path, 'ro');
  await mkdir(readOnly);
  await run('mount', ['-t', 'tmpfs', '-o', 'size=8m', 'tmpfs', readOnly]);
  mounted = true;
  await mkdir(join(readOnly, 'dest'));
  await run('mount', ['-o', 'remount,ro', readOnly]);
});

after(async () => {
  await scheduler?.close();
  if (mounted) await run('umount', [readOnly]);
  await work.cleanup();
});

async function failedPull(args: string[]): Promise<{ code?: number; stderr?: string }> {
  return run(process.execPath, [CLI, 'pull', ...args], { timeout: 30_000 }).then(
    () => assert.fail('a pull onto a read-only file system should fail'),
    (error: { code?: number; stderr?: string }) => error,
  );
}

describe('a pull onto a read-only file system', { skip, timeout: 60_000 }, () => {
  for (const where of ['dest', 'dest/sub/deeper']) {
    it(`into ${where}: IO naming EROFS, not ENOENT, exit 1`, async () => {
      const dest = join(readOnly, where);
      const failed = await failedPull([modelDir, '--to', dest, '--manifest', manifestPath, '--no-agent']);
      assert.equal(failed.code, 1, failed.stderr);
      assert.match(failed.stderr ?? '', /IO: .*EROFS: read-only file system/);
      assert.doesNotMatch(failed.stderr ?? '', /ENOENT/);
    });
  }

  it('with --scheduler: IO naming EROFS', async () => {
    const dest = join(readOnly, 'dest');
    const failed = await failedPull([
      modelDir,
      '--to',
      dest,
      '--manifest',
      manifestPath,
      '--scheduler',
      scheduler?.url ?? '',
    ]);
    assert.equal(failed.code, 1, failed.stderr);
    assert.match(failed.stderr ?? '', /IO: .*EROFS: read-only file system/);
    assert.equal(existsSync(join(dest, '.weightcast')), false);
  });
});
