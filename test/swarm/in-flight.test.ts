import { test } from 'node:test';
import assert from 'node:assert/strict';
import { InFlightPieces } from '../../src/swarm/core/in-flight.js';

test('pieces in flight per host, hedged pieces counted twice but distinct once', () => {
  const inFlight = new InFlightPieces(3);
  inFlight.ensureHosts(2);
  inFlight.add(1, 7);
  inFlight.add(1, 7);
  inFlight.add(1, 9);
  assert.equal(inFlight.count(1, 7), 2);
  assert.equal(inFlight.distinctCount(1), 2);
  assert.ok(inFlight.has(1, 9) && !inFlight.has(0, 9) && !inFlight.has(1, 8));
  assert.throws(() => inFlight.add(1, 10), /invariant/, 'a row never holds more than its width');
  inFlight.remove(1, 7);
  assert.equal(inFlight.count(1, 7), 1);
  assert.equal(inFlight.distinctCount(1), 2);
  inFlight.remove(1, 7);
  assert.equal(inFlight.distinctCount(1), 1);
  assert.throws(() => inFlight.remove(1, 7), /invariant/);
  inFlight.ensureHosts(100);
  assert.ok(inFlight.has(1, 9), 'rows survive growth');
  inFlight.clearHost(1);
  assert.equal(inFlight.distinctCount(1), 0);
  assert.equal(inFlight.has(1, 9), false);
});
