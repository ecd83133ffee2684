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
