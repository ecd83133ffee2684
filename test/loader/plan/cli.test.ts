import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { memoryIo } from '../../../src/cli/io.js';
import { runCli } from '../../../src/cli/main.js';
import { readPlanManifest } from '../../../src/loader/plan/files.js';
import { synthesizeModel } from '../../../src/synth/synth.js';
import { tempDir } from '../../helpers/fixtures.js';

let root: { path: string; cleanup: () => Promise<void> };
let model: string;

before(async () => {
  root = await tempDir('plan-cli');
  model = join(root.path, 'model');
  await synthesizeModel({
    dir: model,
    arch: 'qwen2-moe',
    hidden: 128,
    layers: 2,
    experts: 4,
    vocab: 500,
    seed: 6,
  });
});

after(async () => {
  await root.cleanup();
});

test('plan prints every rank with its tensors, slices, ranges and totals', async () => {
  const io = memoryIo();
  assert.equal(await runCli(['plan', model, '--tp', '2', '--ep', '2'], io), 0);
  const text = io.out.join('');
  assert.match(text, /^qwen2_moe: tp 2, pp 1, ep 2: 2 ranks/);
  assert.match(text, /rank 1 \(stage 0, tp rank 1, layers 0-1, experts 2-3\)/);
  assert.match(text, /model\.layers\.0\.self_attn\.o_proj\.weight +BF16 +dim1 \[64, 128\)/);
  assert.match(text, /model\.embed_tokens\.weight +BF16 +dim0 \[256, 500\) pad 256/);
  assert.match(text, /@\d+ 128x128\/256/);
  assert.equal(io.err.join(''), '');
});

test('plan --json --rank prints one object with only that rank', async () => {
  const io = memoryIo();
  assert.equal(await runCli(['plan', model, '--tp', '2', '--pp', '2', '--rank', '3', '--json'], io), 0);
  assert.equal(io.out.length, 1);
  const result = JSON.parse(io.out[0] ?? '') as {
    event: string;
    ranks: Array<{ rank: number; stage: number; totals: { sourceBytes: number } }>;
  };
  assert.equal(result.event, 'plan');
  assert.deepEqual(
    result.ranks.map((rank) => [rank.rank, rank.stage]),
    [[3, 1]],
  );
  assert.ok((result.ranks[0]?.totals.sourceBytes ?? 0) > 0);
});

test('plan --hash --out writes a plan manifest that reads back under its digest', async () => {
  const io = memoryIo();
  const out = join(root.path, 'plan-manifest.json');
  assert.equal(
    await runCli(['plan', model, '--tp', '2', '--weights', '2,1', '--hash', '--out', out, '--json'], io),
    0,
  );
  const summary = JSON.parse(io.out[0] ?? '') as { event: string; digest: string; ranks: number };
  assert.equal(summary.event, 'plan-manifest');
  const manifest = await readPlanManifest(out, { expectedDigest: summary.digest });
  assert.deepEqual(manifest.weights, [2, 1]);
  assert.equal(manifest.ranks.length, 2);
});

test('bad options exit 2 with typed errors', async () => {
  const cases: Array<[string[], RegExp]> = [
    [['--tp', '3'], /PLAN_INDIVISIBLE/],
    [['--tp', '2', '--ep', '3'], /PLAN_INVALID_OPTIONS/],
    [['--tp', '2', '--weights', '1,x'], /USAGE/],
    [['--tp', '2', '--rank', '2'], /USAGE/],
    [['--tp', '2', '--hash'], /USAGE/],
    [['--tp', 'two'], /USAGE/],
  ];
  for (const [extra, pattern] of cases) {
    const io = memoryIo();
    assert.equal(await runCli(['plan', model, ...extra], io), 2, extra.join(' '));
    assert.match(io.err.join(''), pattern, extra.join(' '));
  }
  const missing = memoryIo();
  assert.equal(await runCli(['plan', join(root.path, 'nowhere'), '--tp', '1'], missing), 2);
  assert.match(missing.err.join(''), /PLAN_UNSUPPORTED_MODEL/);
});

test('one rank is counted in the singular', async () => {
  const io = memoryIo();
  assert.equal(await runCli(['plan', model, '--tp', '1'], io), 0);
  assert.match(io.out.join(''), /^qwen2_moe: tp 1, pp 1, ep 1: 1 rank; model/);
});

test('plan of a URL says it needs a local model directory (the URL was mangled into a path)', async () => {
  const url = memoryIo();
  assert.equal(await runCli(['plan', 'http://host/', '--tp', '2'], url), 2);
  assert.match(url.err.join(''), /USAGE: plan needs a local model directory, not a URL \(http:\/\/host\/\)/);
});
