/**
 * synth checks the destination's free space before writing: on a file system too small for the
 * model it stops with IO naming both sizes and writes nothing (before, it wrote until ENOSPC). The
 * file system is a 1 MiB tmpfs mounted for the test (root only; skipped with a message otherwise) and
 * unmounted whatever happens. The arithmetic alone: space.test.ts.
 */

import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdir, readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import { memoryIo } from '../../src/cli/io.js';
import { runCli } from '../../src/cli/main.js';
import { isWeightcastError } from '../../src/errors.js';
import { synthesizeModel } from '../../src/synth/synth.js';
import { tempDir } from '../helpers/fixtures.js';

const run = promisify(execFile);
const isRoot = process.getuid?.() === 0;
const skip = isRoot ? false : 'needs root to mount a small tmpfs';
if (!isRoot) console.log(`# synth free-space tests skipped: ${skip}`);

const MIB = 1024 * 1024;
let work: { path: string; cleanup: () => Promise<void> };
let small: string;
let mounted = false;

before(async () => {
  work = await tempDir('synth-free-space');
  if (!isRoot) return;
  small = join(work.path, 'small');
  await mkdir(small);
  await run('mount', ['-t', 'tmpfs', '-o', 'size=1m', 'tmpfs', small]);
  mounted = true;
});

after(async () => {
  if (mounted) await run('umount', [small]);
  await work.cleanup();
});

describe('synth onto a file system too small for the model', { skip, timeout: 60_000 }, () => {
  it('stops with IO naming what it needs and what is free, and writes nothing', async () => {
    const io = memoryIo();
    const to = join(small, 'model', 'deeper');
    assert.equal(await runCli(['synth', '--to', to, '--size-mb', '4'], io), 1);
    assert.match(
      io.err.join(''),
      /IO: not enough free space for the model in .*deeper: it needs 4\.\d\d MiB, the file system has 1\.00 MiB free; nothing was written/,
    );
    assert.deepEqual(await readdir(small), [], 'not even the directory was made');
  });

  it('a model that fits is written, and writing it again over itself needs no more room', async () => {
    const dir = join(small, 'fits');
    const first = await synthesizeModel({ dir, sizeBytes: 0.6 * MIB, seed: 1 });
    assert.ok(first.totalBytes > 0.5 * MIB);
    // Less than the model is free now, but the files it replaces make room.
    const again = await synthesizeModel({ dir, sizeBytes: 0.6 * MIB, seed: 2 });
    assert.deepEqual(again.files, first.files);
    await assert.rejects(
      synthesizeModel({ dir: join(small, 'second'), sizeBytes: 0.6 * MIB }),
      (error) => isWeightcastError(error, 'IO') && /not enough free space/.test(error.message),
    );
  });
});
