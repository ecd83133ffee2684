import { test } from 'node:test';
import assert from 'node:assert/strict';
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
