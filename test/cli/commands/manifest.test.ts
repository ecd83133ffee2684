import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { availableParallelism } from 'node:os';
import { runCli } from '../../../src/cli/main.js';
import { memoryIo } from '../../../src/cli/io.js';
import { freePort, tempDir, writeSmallModel } from '../../helpers/fixtures.js';

test('manifest --out that cannot be written is refused before anything is hashed', async () => {
  const dir = await tempDir('cli-manifest-out');
  try {
    const model = join(dir.path, 'model');
    await writeSmallModel(model);
    const missing = memoryIo();
    assert.equal(await runCli(['manifest', model, '--out', join(dir.path, 'nope', 'x.json')], missing), 2);
    assert.match(missing.err.join(''), /USAGE: --out .*nope.x\.json: directory .*nope does not exist/);
    // No progress line: the model was not read.
    assert.doesNotMatch(missing.out.join('') + missing.err.join(''), /hashing/);

    await mkdir(join(dir.path, 'a-dir'));
    const onDir = memoryIo();
    assert.equal(await runCli(['manifest', model, '--out', join(dir.path, 'a-dir')], onDir), 2);
    assert.match(onDir.err.join(''), /USAGE: --out .*a-dir: is a directory/);
  } finally {
    await dir.cleanup();
  }
});

test('manifest --threads above 4 per core is refused before any worker starts', async () => {
  const dir = await tempDir('cli-manifest-threads');
  try {
    const model = join(dir.path, 'model');
    await writeSmallModel(model);
    const many = memoryIo();
    assert.equal(
      await runCli(['manifest', model, '--threads', String(4 * availableParallelism() + 1)], many),
      2,
    );
    assert.match(many.err.join(''), /USAGE: --threads \d+ is more than 4 per core/);
    const most = memoryIo();
    assert.equal(await runCli(['manifest', model, '--threads', String(4 * availableParallelism())], most), 0);
  } finally {
    await dir.cleanup();
  }
});

test('a one-file model is counted in the singular by manifest and pull', async () => {
  const dir = await tempDir('cli-manifest-one');
  try {
    const model = join(dir.path, 'model');
    await mkdir(model);
    await writeFile(join(model, 'config.json'), '{}');
    const made = memoryIo();
    assert.equal(await runCli(['manifest', model, '--out', join(dir.path, 'm.json')], made), 0);
    assert.match(made.out.join(''), /^1 file, 2 B, 1 piece of 256\.0 KiB; hashed/m);
    const pulled = memoryIo();
    assert.equal(await runCli(['pull', model, '--to', join(dir.path, 'copy'), '--no-agent'], pulled), 0);
    assert.match(pulled.out.join(''), /^pulled 1 file, 2 B into .*; 0 pieces reused, 0 rejected\)$/m);
  } finally {
    await dir.cleanup();
  }
});

test('manifest and pull of a URL where nothing answers fail in seconds with ORIGIN_UNREACHABLE (exit 1)', async () => {
  const dir = await tempDir('cli-unreachable');
  try {
    const url = `http://127.0.0.1:${await freePort()}/`;
    const to = join(dir.path, 'copy');
    for (const argv of [
      ['manifest', url],
      ['pull', url, '--to', to, '--no-agent'],
    ]) {
      const io = memoryIo();
      assert.equal(await runCli(argv, io), 1, argv[0]);
      const err = io.err.join('');
      assert.match(err, /, 0 s of 3 s waited\n/);
      assert.match(
        err,
        /ORIGIN_UNREACHABLE: nothing answered at http:\/\/127\.0\.0\.1:\d+\/ \(\d+ tries in /,
      );
      assert.match(err, /connect ECONNREFUSED .*\): check the URL's host and port\n$/);
    }
    assert.equal(existsSync(to), false, 'the pull made its destination');
  } finally {
    await dir.cleanup();
  }
});
