/**
 * A rank loaded with `--format hf` into a directory that holds model files it would not replace
 * (another pipeline stage's shards, from an earlier load) is refused with USAGE before anything is
 * written: the two ranks' files would read as one model. The same rank again replaces its files.
 */

import assert from 'node:assert/strict';
import { readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { loadCommand, type LoadFlags } from '../../../src/cli/commands/load.js';
import { memoryIo } from '../../../src/cli/io.js';
import { synthesizeModel } from '../../../src/synth/synth.js';
import { tempDir } from '../../helpers/fixtures.js';

let work: { path: string; cleanup: () => Promise<void> };
let model: string;

before(async () => {
  work = await tempDir('slice-destination');
  model = join(work.path, 'model');
  // Two layers in two shards: stage 0 of pp 2 holds the first, stage 1 the second.
  await synthesizeModel({
    dir: model,
    arch: 'llama',
    hidden: 128,
    layers: 2,
    vocab: 512,
    shards: 2,
    seed: 3,
  });
});

after(async () => {
  await work.cleanup();
});

function rankFlags(to: string, rank: number): LoadFlags {
  return {
    format: 'hf',
    to,
    tp: '1',
    pp: '2',
    rank: String(rank),
    memoryMb: '4',
    concurrency: '2',
    json: true,
  };
}

test("a rank's hf output is refused in a directory holding another stage's shards, and replaces its own", async () => {
  const to = join(work.path, 'out');
  const first = memoryIo();
  assert.equal(await loadCommand(model, rankFlags(to, 0), first), 0, first.err.join(''));
  const written = (await readdir(to)).sort();
  assert.ok(written.includes('model-00001-of-00002.safetensors'));
  assert.ok(!written.includes('model-00002-of-00002.safetensors'));

  const other = memoryIo();
  assert.equal(await loadCommand(model, rankFlags(to, 1), other), 2, other.err.join(''));
  const error = (JSON.parse(other.out.at(-1) ?? '{}') as { error: { code: string; message: string } }).error;
  assert.equal(error.code, 'USAGE');
  assert.match(error.message, /would not replace \(model-00001-of-00002\.safetensors\)/);
  assert.deepEqual((await readdir(to)).sort(), written, 'nothing written, nothing removed');

  const again = memoryIo();
  assert.equal(await loadCommand(model, rankFlags(to, 0), again), 0, again.err.join(''));
  assert.deepEqual((await readdir(to)).sort(), written);
});
