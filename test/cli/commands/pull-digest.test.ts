import { test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { runCli } from '../../../src/cli/main.js';
import { memoryIo } from '../../../src/cli/io.js';
import { tempDir, writeSmallModel } from '../../helpers/fixtures.js';

test("a pull without a manifest names the piece size that gives `manifest` the model's same name", async () => {
  const dir = await tempDir('cli-pull-digest');
  try {
    const model = join(dir.path, 'model');
    await writeSmallModel(model);
    const pulled = memoryIo();
    assert.equal(await runCli(['pull', model, '--to', join(dir.path, 'out'), '--no-agent'], pulled), 0);
    const said =
      /model (sha256:[0-9a-f]{64}) \(pieces of .*: `weightcast manifest --piece-size (\S+)` gives the same name\)/.exec(
        pulled.out.join(''),
      );
    assert.ok(said !== null, pulled.out.join(''));
    const made = memoryIo();
    assert.equal(await runCli(['manifest', model, '--piece-size', said[2] as string, '--json'], made), 0);
    assert.match(made.out.join(''), new RegExp(`"digest":"${said[1] as string}"`));
  } finally {
    await dir.cleanup();
  }
});
