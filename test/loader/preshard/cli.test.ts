/**
 * `weightcast preshard` through its command function: a JSON summary with peak RSS and time, files
 * in place, and exit code 2 with a typed error for bad flags, a model the layout cannot take, or a
 * destination that is not ours.
 */

import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { readdir, writeFile, mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { preshardCommand } from '../../../src/cli/commands/preshard.js';
import { memoryIo } from '../../../src/cli/io.js';
import { synthesizeModel } from '../../../src/synth/synth.js';
import { tempDir } from '../../helpers/fixtures.js';

let root: { path: string; cleanup: () => Promise<void> };
let model: string;

before(async () => {
  root = await tempDir('preshard-cli');
  model = join(root.path, 'deepseek');
  await synthesizeModel({
    dir: model,
    arch: 'deepseek-v3',
    hidden: 256,
    layers: 1,
    experts: 2,
    vocab: 2100,
    seed: 5,
  });
});

after(async () => {
  await root.cleanup();
});

const defaults = { pp: '1', layout: 'hf', memoryMb: '8', concurrency: '2', outputManifest: true };

test('a JSON summary: ranks, files, bytes, peak RSS and time', async () => {
  const io = memoryIo();
  const to = join(root.path, 'out');
  const code = await preshardCommand(
    model,
    { ...defaults, tp: '2', pp: '1', to, quantize: 'fp8', partMb: '0.25', json: true },
    io,
  );
  assert.equal(code, 0, io.err.join('') + io.out.join(''));
  const lines = io.out
    .join('')
    .trim()
    .split('\n')
    .map((line) => JSON.parse(line) as Record<string, unknown>);
  const done = lines.find((line) => line['event'] === 'done');
  assert.ok(done);
  assert.equal(done['quantize'], 'fp8');
  assert.ok(typeof done['peakRssBytes'] === 'number' && done['peakRssBytes'] > 0);
  assert.ok(typeof done['seconds'] === 'number');
  const ranks = done['ranks'] as Array<{ files: string[] }>;
  assert.equal(ranks.length, 2);
  assert.ok((ranks[0]?.files.length ?? 0) > 1, 'parts split at 256 KiB');
  const names = await readdir(to);
  for (const name of [
    'config.json',
    'tokenizer.json',
    'weightcast-preshard.json',
    'weightcast-manifest.json',
  ]) {
    assert.ok(names.includes(name), name);
  }
});

test('text summary without --json', async () => {
  const io = memoryIo();
  const code = await preshardCommand(model, { ...defaults, tp: '1', to: join(root.path, 'text') }, io);
  assert.equal(code, 0);
  assert.match(io.out.join(''), /pre-sharded deepseek_v3 for tp 1 x pp 1/);
  assert.match(io.out.join(''), /peak RSS/);
});

test('bad flags, an unsupported layout and a foreign destination exit 2 with typed errors', async () => {
  const cases: Array<[Record<string, unknown>, string]> = [
    [{ layout: 'megatron' }, 'USAGE'],
    [{ quantize: 'int4' }, 'USAGE'],
    [{ tp: '0' }, 'USAGE'],
    [{ layout: 'vllm' }, 'PRESHARD_UNSUPPORTED'],
    // embed_tokens is 2100 x 256 BF16, just over 1 MiB.
    [{ memoryMb: '1', tp: '1' }, 'LOADER_TENSOR_TOO_LARGE'],
  ];
  for (const [flags, expected] of cases) {
    const io = memoryIo();
    const code = await preshardCommand(
      model,
      { ...defaults, tp: '2', to: join(root.path, 'bad'), json: true, ...flags },
      io,
    );
    assert.equal(code, 2, JSON.stringify(flags));
    const error = (
      JSON.parse(io.out.join('').trim().split('\n').at(-1) ?? '{}') as { error?: { code?: string } }
    ).error;
    assert.equal(error?.code, expected, JSON.stringify(flags));
  }
  const foreign = join(root.path, 'foreign');
  await mkdir(foreign);
  await writeFile(join(foreign, 'notes.txt'), 'mine');
  const io = memoryIo();
  assert.equal(await preshardCommand(model, { ...defaults, tp: '2', to: foreign }, io), 2);
  assert.match(io.err.join(''), /PRESHARD_DESTINATION_CONFLICT/);
});
