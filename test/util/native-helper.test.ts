/** The native helper's buffer address (native/buffer-address.c), when it was built at install. */

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { nativeHelper } from '../../src/util/native-helper.js';

test('addressModulo: a view k bytes in sits k bytes further; a bad question gets -1', (t) => {
  const helper = nativeHelper();
  if (helper?.addressModulo === undefined) return t.skip('the native helper is not built on this machine');
  const addressModulo = helper.addressModulo.bind(helper);
  const buffer = Buffer.allocUnsafeSlow(64 * 1024);
  const base = addressModulo(buffer, 4096);
  assert.ok(base >= 0 && base < 4096);
  for (const k of [1, 16, 100, 4095, 4096, 5000, 60_000]) {
    assert.equal(addressModulo(buffer.subarray(k), 4096), (base + k) % 4096, `${k} bytes in`);
    assert.equal(addressModulo(buffer.subarray(k), 16), (base + k) % 16);
  }
  // A typed array of another kind points at its bytes too.
  const floats = new Float64Array(buffer.buffer, buffer.byteOffset + 8, 4);
  assert.equal(addressModulo(floats, 4096), (base + 8) % 4096);
  // Not a power of two, out of range, not a view.
  for (const modulus of [0, 3, 4097, -4096, 2 ** 31 - 1])
    assert.equal(addressModulo(buffer, modulus), -1, `modulus ${modulus}`);
  assert.equal(addressModulo({} as ArrayBufferView, 4096), -1);
  assert.equal(addressModulo(new DataView(buffer.buffer), 4096), -1);
});
