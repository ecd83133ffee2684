import { test } from 'node:test';
import assert from 'node:assert/strict';
import { isWeightcastError } from '../../src/errors.js';
import { isModelFileName, staleModelFiles, staleModelFilesError } from '../../src/format/model-directory.js';

test('model files are the safetensors files and the index', () => {
  assert.ok(isModelFileName('model-00001-of-00002.safetensors'));
  assert.ok(isModelFileName('model.safetensors'));
  assert.ok(isModelFileName('model.safetensors.index.json'));
  for (const name of ['config.json', 'tokenizer.json', 'a.safetensors.weightcast-partial', 'notes.txt']) {
    assert.ok(!isModelFileName(name), name);
  }
});

test('stale model files are those the new model does not write, sorted; other files do not count', () => {
  const present = [
    'model-00003-of-00003.safetensors',
    'config.json',
    'model-00001-of-00003.safetensors',
    'model.safetensors.index.json',
    'README.md',
  ];
  assert.deepEqual(staleModelFiles(present, ['model-00001-of-00002.safetensors', 'config.json']), [
    'model-00001-of-00003.safetensors',
    'model-00003-of-00003.safetensors',
    'model.safetensors.index.json',
  ]);
  assert.deepEqual(
    staleModelFiles(present, [
      'model-00001-of-00003.safetensors',
      'model-00003-of-00003.safetensors',
      'model.safetensors.index.json',
    ]),
    [],
  );
  assert.deepEqual(staleModelFiles([], ['x.safetensors']), []);
});

test('the refusal is USAGE naming the files and what to do', () => {
  const names = Array.from({ length: 7 }, (_, index) => `s${index}.safetensors`);
  const error = staleModelFilesError('out', names);
  assert.ok(isWeightcastError(error, 'USAGE'));
  assert.match(error.message, /^out already holds model files the new model would not replace/);
  assert.match(
    error.message,
    /s0\.safetensors, s1\.safetensors, s2\.safetensors, s3\.safetensors, s4\.safetensors and 2 more/,
  );
  assert.match(error.message, /remove them or choose an empty directory/);
  assert.deepEqual(error.details['stale'], names);
  assert.match(staleModelFilesError('out', ['a.safetensors']).message, /\(a\.safetensors\).*remove it or/);
});
