import { test } from 'node:test';
import assert from 'node:assert/strict';
import { isWeightcastError } from '../../src/errors.js';
import { HttpOrigin } from '../../src/origin/http.js';
import { LocalOrigin } from '../../src/origin/local.js';
import { openOrigin } from '../../src/origin/open.js';

test('openOrigin picks the implementation by scheme', async () => {
  const cases = [
    ['http://127.0.0.1:9/models/x', HttpOrigin],
    ['HTTPS://127.0.0.1:9/org/model/resolve/main/', HttpOrigin],
    ['file:///models/llama', LocalOrigin],
    ['relative/model', LocalOrigin],
    ['./model', LocalOrigin],
  ] as const;
  for (const [source, kind] of cases) {
    const origin = openOrigin(source);
    assert.ok(origin instanceof kind, source);
    await origin.close();
  }
});

test('openOrigin rejects other schemes with a clear message', () => {
  for (const source of ['s3://bucket/model', 'ftp://host/model', 'gs://bucket/x']) {
    assert.throws(
      () => openOrigin(source),
      (error: unknown) =>
        isWeightcastError(error, 'ORIGIN_UNSUPPORTED') && /not supported/.test(error.message),
    );
  }
});

test('an HTTP origin location is the base URL with a trailing slash and no credentials', async () => {
  const origin = openOrigin('https://user:pw@127.0.0.1:9/org/model/resolve/main');
  assert.equal(origin.location, 'https://127.0.0.1:9/org/model/resolve/main/');
  await origin.close();
});
