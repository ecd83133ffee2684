import { test } from 'node:test';
import assert from 'node:assert/strict';
import { WeightcastError, isWeightcastError } from '../src/errors.js';

test('errors carry a stable code and serialise with their details', () => {
  const error = new WeightcastError('MANIFEST_UNSAFE_PATH', 'bad path', { file: '../x' });
  assert.equal(error.code, 'MANIFEST_UNSAFE_PATH');
  assert.ok(isWeightcastError(error, 'MANIFEST_UNSAFE_PATH'));
  assert.equal(isWeightcastError(new Error('plain')), false);
  assert.deepEqual(error.toJSON(), {
    name: 'WeightcastError',
    code: 'MANIFEST_UNSAFE_PATH',
    message: 'bad path',
    file: '../x',
  });
});

test('an error made by another copy of the errors module is still a WeightcastError', async () => {
  // A second instance of the same module, as a command's route bundle and a module it loads lazily
  // each hold one (scripts/bundle-commands.ts).
  const other = (await import(`../src/errors.js?copy=${Date.now()}`)) as typeof import('../src/errors.js');
  assert.notEqual(other.WeightcastError, WeightcastError, 'the query did not give a second copy');
  const foreign = new other.WeightcastError('IO', 'disk full', { errno: 'ENOSPC' });
  assert.ok(foreign instanceof WeightcastError);
  assert.ok(isWeightcastError(foreign, 'IO'));
  assert.equal(isWeightcastError(foreign, 'USAGE'), false);
  assert.ok(other.isWeightcastError(new WeightcastError('USAGE', 'x'), 'USAGE'));
  // The mark is the class's own: plain errors, lookalikes and primitives are not taken for ours.
  assert.equal(new Error('plain') instanceof WeightcastError, false);
  assert.equal({ name: 'WeightcastError', code: 'IO' } instanceof WeightcastError, false);
  assert.equal(isWeightcastError(null), false);
  assert.equal(isWeightcastError('IO'), false);
  // Errors still subclass Error, and a subclass of Error is not one of ours.
  assert.ok(foreign instanceof Error);
  class Other extends Error {}
  assert.equal(new Other('x') instanceof WeightcastError, false);
});

test("the README's error table is the catalogue: the same codes with the same summaries", async () => {
  const { readFile } = await import('node:fs/promises');
  const { ERROR_CATALOGUE } = await import('../src/errors.js');
  const readme = await readFile(new URL('../../README.md', import.meta.url), 'utf8');
  const rows = [...readme.matchAll(/^\| `([A-Z0-9_]+)` \| (.*) \|$/gm)].map((match): [string, string] => [
    match[1] ?? '',
    match[2] ?? '',
  ]);
  const table: Record<string, string> = Object.fromEntries(rows);
  assert.equal(rows.length, Object.keys(table).length, 'a code appears twice in the README');
  const catalogue = Object.fromEntries(
    Object.entries(ERROR_CATALOGUE).map(([code, entry]) => [code, entry.summary]),
  );
  assert.deepEqual(table, catalogue);
});

test('exit classes: bad input and usage exit 2, failed jobs 1; resumable codes are failures', async () => {
  const { ERROR_CATALOGUE } = await import('../src/errors.js');
  for (const code of [
    'USAGE',
    'MANIFEST_INVALID',
    'SAFETENSORS_INVALID_JSON',
    'PLAN_INDIVISIBLE',
    'SYNTH_INVALID_OPTIONS',
  ] as const) {
    assert.equal(ERROR_CATALOGUE[code].exit, 2, code);
  }
  for (const [code, entry] of Object.entries(ERROR_CATALOGUE)) {
    if ('resumable' in entry) assert.equal(entry.exit, 1, code);
  }
  assert.equal(ERROR_CATALOGUE.SWARM_BUSY.status, 503);
  assert.equal(ERROR_CATALOGUE.SEED_VERIFY_FAILED.status, 422);
});
