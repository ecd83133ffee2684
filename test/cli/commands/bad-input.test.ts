import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import { join } from 'node:path';
import { runCli } from '../../../src/cli/main.js';
import { memoryIo } from '../../../src/cli/io.js';
import { tempDir, writeSmallModel } from '../../helpers/fixtures.js';

async function run(argv: string[]): Promise<{ code: number; err: string }> {
  const io = memoryIo();
  const code = await runCli(argv, io);
  return { code, err: io.err.join('') };
}

test('bad input named on the command line exits 2 with a message that says what is wrong', async () => {
  const dir = await tempDir('cli-bad-input');
  try {
    const model = join(dir.path, 'model');
    await writeSmallModel(model);

    const missing = await run(['verify', model, '--manifest', join(dir.path, 'nope.json')]);
    assert.equal(missing.code, 2);
    assert.match(missing.err, /^weightcast: USAGE: the manifest .*nope\.json does not exist\n$/);

    const directory = await run(['verify', model, '--manifest', dir.path]);
    assert.equal(directory.code, 2);
    assert.match(directory.err, /USAGE: the manifest .* is a directory, not a file/);

    const relativeUrl = await run(['manifest', 'file://relative/x']);
    assert.equal(relativeUrl.code, 2);
    assert.match(relativeUrl.err, /ORIGIN_UNSUPPORTED: file:\/\/relative\/x is not a local file URL/);
    assert.doesNotMatch(relativeUrl.err, /file system/);

    const host = await run(['serve', model, '--host', '999.1.1.1', '--port', '0']);
    assert.equal(host.code, 2);
    assert.match(host.err, /USAGE: --host 999\.1\.1\.1: no such host name or address/);
  } finally {
    await dir.cleanup();
  }
});

test('a model directory whose index names a missing shard is refused by pull, manifest and load (exit 2)', async () => {
  const dir = await tempDir('cli-missing-shard');
  try {
    const model = join(dir.path, 'model');
    await writeSmallModel(model);
    await rm(join(model, 'model-00002-of-00002.safetensors'));
    const out = join(dir.path, 'out');
    for (const argv of [
      ['pull', model, '--to', out, '--no-agent'],
      ['manifest', model, '--out', join(dir.path, 'manifest.json')],
      ['load', model, '--format', 'hf', '--to', out],
      ['load', model, '--tp', '1', '--rank', '0', '--format', 'hf', '--to', out],
    ]) {
      const result = await run(argv);
      assert.equal(result.code, 2, `${argv.join(' ')}: ${result.err}`);
      assert.match(
        result.err,
        /^weightcast: INDEX_SHARD_MISSING: .*model is incomplete: its model\.safetensors\.index\.json names 1 shard of 2 that is not there: model-00002-of-00002\.safetensors\n$/,
      );
      assert.equal(existsSync(out), false, `${argv[0] ?? ''} wrote its destination`);
      assert.equal(existsSync(join(dir.path, 'manifest.json')), false);
    }
  } finally {
    await dir.cleanup();
  }
});
