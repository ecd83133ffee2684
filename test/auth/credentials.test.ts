/**
 * Cluster credentials in isolation: which role a token grants (Gate), where a command's tokens come
 * from (flags over the environment, private files only, no short secrets), and the listen guard.
 */

import assert from 'node:assert/strict';
import { chmod, writeFile } from 'node:fs/promises';
import type { IncomingMessage } from 'node:http';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { resolveAccess } from '../../src/auth/credentials.js';
import { Gate, bearerOf } from '../../src/auth/gate.js';
import { assertListenAllowed, isLoopbackHost } from '../../src/auth/transport.js';
import { isWeightcastError } from '../../src/errors.js';
import { tempDir } from '../helpers/fixtures.js';

const CLUSTER = 'cluster-token-0123456789abcdef';
const OPERATOR = 'operator-token-0123456789abcdef';

function request(authorization?: string): IncomingMessage {
  return { headers: authorization === undefined ? {} : { authorization } } as IncomingMessage;
}

describe('Gate', () => {
  const gate = new Gate({ clusterToken: CLUSTER, operatorToken: OPERATOR });

  it('grants member to the cluster token and operator to the operator token, nothing to others', () => {
    assert.equal(gate.roleOf(request(`Bearer ${CLUSTER}`)), 'member');
    assert.equal(gate.roleOf(request(`Bearer ${OPERATOR}`)), 'operator');
    assert.equal(gate.roleOf(request(`bearer ${CLUSTER}`)), 'member');
    for (const header of [
      undefined,
      '',
      'Bearer',
      `Basic ${CLUSTER}`,
      `Bearer ${CLUSTER}x`,
      `Bearer ${CLUSTER.slice(1)}`,
    ]) {
      assert.equal(gate.roleOf(request(header)), undefined, String(header));
    }
    assert.equal(gate.roleOfSecret(Buffer.from(CLUSTER)), 'member');
    assert.equal(gate.roleOfSecret(new Uint8Array()), undefined);
    assert.equal(gate.roleOfSecret('x'.repeat(2000)), undefined);
  });

  it('answers UNAUTHORIZED without a credential and FORBIDDEN for a member on an operator route', () => {
    assert.throws(
      () => gate.authorize(request(), 'member'),
      (error) => isWeightcastError(error, 'UNAUTHORIZED'),
    );
    assert.throws(
      () => gate.authorize(request(`Bearer ${CLUSTER}`), 'operator'),
      (error) => isWeightcastError(error, 'FORBIDDEN'),
    );
    assert.equal(gate.authorize(request(`Bearer ${OPERATOR}`), 'member'), 'operator');
  });

  it('is open when no token is configured, and an operator token alone admits no member', () => {
    assert.equal(new Gate().open, true);
    assert.equal(new Gate().authorize(request(), 'operator'), 'operator');
    const operatorOnly = new Gate({ operatorToken: OPERATOR });
    assert.equal(operatorOnly.roleOf(request(`Bearer ${CLUSTER}`)), undefined);
    assert.equal(operatorOnly.roleOf(request(`Bearer ${OPERATOR}`)), 'operator');
  });

  it('reads bearer tokens strictly', () => {
    assert.equal(bearerOf('Bearer abc'), 'abc');
    assert.equal(bearerOf('Bearer  abc '), 'abc');
    assert.equal(bearerOf('Bearer a b'), undefined);
    assert.equal(bearerOf('Token abc'), undefined);
  });
});

describe('resolveAccess', () => {
  it('takes tokens from the environment, a file flag over it, and sends the operator token only for operator work', async () => {
    const dir = await tempDir('credentials');
    try {
      const env = { WEIGHTCAST_CLUSTER_TOKEN: CLUSTER, WEIGHTCAST_OPERATOR_TOKEN: OPERATOR };
      const fromEnv = await resolveAccess({}, { env });
      assert.deepEqual(fromEnv.credentials, { clusterToken: CLUSTER, operatorToken: OPERATOR });
      assert.equal(fromEnv.client.token, CLUSTER);
      assert.equal((await resolveAccess({}, { env, sendOperator: true })).client.token, OPERATOR);
      const file = join(dir.path, 'token');
      await writeFile(file, 'from-a-file-0123456789\n', { mode: 0o600 });
      const fromFile = await resolveAccess({ clusterTokenFile: file }, { env });
      assert.equal(fromFile.credentials.clusterToken, 'from-a-file-0123456789');
      assert.deepEqual((await resolveAccess({}, { env: {} })).credentials, {});
    } finally {
      await dir.cleanup();
    }
  });

  it('refuses a token file every user can read, a short token and a missing file, naming them', async () => {
    const dir = await tempDir('credentials');
    try {
      const file = join(dir.path, 'token');
      await writeFile(file, CLUSTER);
      await chmod(file, 0o644);
      await assert.rejects(resolveAccess({ clusterTokenFile: file }, { env: {} }), (error) => {
        return isWeightcastError(error, 'USAGE') && /readable by every user/.test(error.message);
      });
      await assert.rejects(
        resolveAccess({}, { env: { WEIGHTCAST_CLUSTER_TOKEN: 'short' } }),
        (error) => isWeightcastError(error, 'USAGE') && /WEIGHTCAST_CLUSTER_TOKEN/.test(error.message),
      );
      await assert.rejects(
        resolveAccess({ operatorTokenFile: join(dir.path, 'absent') }, { env: {} }),
        (error) => isWeightcastError(error, 'USAGE') && /--operator-token-file/.test(error.message),
      );
      await assert.rejects(
        resolveAccess({ tlsCert: file }, { env: {} }),
        (error) => isWeightcastError(error, 'USAGE') && /--tls-key/.test(error.message),
      );
    } finally {
      await dir.cleanup();
    }
  });
});

describe('the listen guard', () => {
  it('lets loopback run open and refuses any other address without a credential unless insecure', () => {
    for (const host of ['127.0.0.1', '127.0.0.2', '::1', '[::1]', 'localhost']) {
      assert.equal(isLoopbackHost(host), true, host);
      assertListenAllowed(host, {}, false, 'the test service');
    }
    for (const host of ['0.0.0.0', '::', '10.0.0.1', 'example.com']) {
      assert.equal(isLoopbackHost(host), false, host);
      assert.throws(
        () => assertListenAllowed(host, {}, false, 'the test service'),
        (error) => isWeightcastError(error, 'USAGE') && /--cluster-token-file/.test(error.message),
      );
      assertListenAllowed(host, {}, true, 'the test service');
      assertListenAllowed(host, { clusterToken: CLUSTER }, false, 'the test service');
    }
  });
});
