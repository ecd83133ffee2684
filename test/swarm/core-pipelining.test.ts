/** Request pipelining: a transfer the shell says is ending frees its slots for the next request. */

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ORIGIN } from '../../src/swarm/core/types.js';
import { Driver, hostSpec, makeConfig } from './harness.js';

test('an ending transfer frees its download and upload slots; its piece stays in flight', () => {
  for (const seed of [1, 2, 3]) {
    const config = makeConfig({
      pieceCount: 10,
      randomSeed: seed,
      downloadsPerHostMax: 2,
      uploadsPerHostMax: 2,
    });
    const driver = new Driver(config, seed);
    driver.add(hostSpec(0, { seed: true }));
    driver.add(hostSpec(1));
    const first = driver.poll();
    assert.equal(first.length, 2, `seed ${seed}`);
    assert.ok(first.every((a) => a.from === 0 && a.host === 1));
    assert.equal(driver.core.parentScore(1, 0), -1, `seed ${seed}: both upload slots are taken`);
    driver.core.handleTransferEnding(driver.nowMs, first[0]!.transferId);
    assert.ok(driver.core.parentScore(1, 0) >= 0, `seed ${seed}: the ending upload's slot is free`);
    const second = driver.poll();
    assert.equal(second.length, 1, `seed ${seed}: one slot freed, one new request`);
    const pieces = new Set([...first, ...second].map((a) => a.piece));
    assert.equal(pieces.size, 3, `seed ${seed}: a piece in flight was requested again`);
    // A repeated hint, or one for an unknown transfer, changes nothing.
    driver.core.handleTransferEnding(driver.nowMs, first[0]!.transferId);
    driver.core.handleTransferEnding(driver.nowMs, 987654321);
    assert.deepEqual(driver.poll(), [], `seed ${seed}`);
    // At most downloadsPerHostMax ending transfers per host: the third hint is ignored.
    driver.core.handleTransferEnding(driver.nowMs, first[1]!.transferId);
    assert.equal(driver.poll().length, 1, `seed ${seed}`);
    driver.core.handleTransferEnding(driver.nowMs, second[0]!.transferId);
    assert.deepEqual(driver.poll(), [], `seed ${seed}: a host ends at most 2 transfers at once`);
    driver.core.checkInvariants();
    assert.ok(driver.runUntilComplete([1]) >= 0, `seed ${seed}: stalled`);
    driver.core.checkInvariants();
  }
});

test('an ending origin transfer frees its reader for another first copy, never the same piece', () => {
  for (const seed of [1, 2, 3]) {
    const config = makeConfig({ pieceCount: 6, randomSeed: seed, originReadersMax: 1 });
    const driver = new Driver(config, seed);
    driver.add(hostSpec(1));
    const [first] = driver.poll();
    assert.equal(first?.from, ORIGIN, `seed ${seed}`);
    assert.deepEqual(driver.poll(), [], `seed ${seed}: one reader`);
    driver.core.handleTransferEnding(driver.nowMs, first.transferId);
    const [next] = driver.poll();
    assert.equal(next?.from, ORIGIN, `seed ${seed}: the freed reader serves the next first copy`);
    assert.notEqual(next.piece, first.piece, `seed ${seed}`);
    driver.core.checkInvariants();
    assert.ok(driver.runUntilComplete([1]) >= 0, `seed ${seed}: stalled`);
    assert.equal(driver.core.stats.originBytesAssigned, config.totalBytes, `seed ${seed}`);
  }
});
