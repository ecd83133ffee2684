import assert from 'node:assert/strict';
import { test } from 'node:test';
import { serverLimitsFromFlags } from '../../src/cli/server-limit-flags.js';
import { isWeightcastError } from '../../src/errors.js';
import { resolveLimits } from '../../src/util/server-limits.js';

test('server limit flags become limits; unset flags keep the defaults', () => {
  const limits = serverLimitsFromFlags({
    bodyBufferMb: '8',
    connectionsPerAddress: '16',
    requestTimeoutS: '5',
    idleTimeoutS: '20',
  });
  assert.equal(limits.bodyBudget?.bytesMax, 8 * 1024 * 1024);
  assert.equal(limits.connectionsPerAddressMax, 16);
  assert.equal(limits.requestTimeoutMs, 5000);
  assert.equal(limits.socketIdleMs, 20_000);
  assert.deepEqual(serverLimitsFromFlags({}), {});
  // Node stops timing requests out when the head may take longer than the whole request.
  const resolved = resolveLimits({ requestTimeoutMs: 5000 }, { headersTimeoutMs: 30_000 });
  assert.equal(resolved.headersTimeoutMs, 5000);
});

test('bad server limit flags are usage errors', () => {
  for (const flags of [{ bodyBufferMb: '0' }, { connectionsPerAddress: 'many' }, { requestTimeoutS: '-1' }]) {
    assert.throws(
      () => serverLimitsFromFlags(flags),
      (error) => isWeightcastError(error, 'USAGE'),
    );
  }
});
