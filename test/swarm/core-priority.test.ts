/** Lazy loading: pieces a loader is waiting for jump the host's queue. */

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ORIGIN } from '../../src/swarm/core/types.js';
import { Driver, hostSpec, makeConfig } from './harness.js';

test('prioritized pieces are assigned first, in request order', () => {
  for (const seed of [1, 2, 3]) {
    const driver = new Driver(makeConfig({ pieceCount: 64, randomSeed: seed, downloadsPerHostMax: 3 }), seed);
    driver.add(hostSpec(1, { seed: true }));
    driver.add(hostSpec(2, { seed: true }));
    driver.add(hostSpec(9));
    driver.core.prioritize(0, 9, [37, 5, 20, 44]);
    assert.deepEqual(
      driver.poll().map((a) => a.piece),
      [37, 5, 20],
      `seed ${seed}`,
    );
    const [first] = driver.inFlight;
    driver.report(first!.transferId, 'verified');
    assert.deepEqual(
      driver.poll().map((a) => a.piece),
      [44],
      `seed ${seed}: the next free slot goes to the next prioritized piece`,
    );
  }
});

test('a prioritization mid-run takes the next free slot', () => {
  const seed = 4;
  const driver = new Driver(makeConfig({ pieceCount: 64, randomSeed: seed, downloadsPerHostMax: 2 }), seed);
  driver.add(hostSpec(1, { seed: true }));
  driver.add(hostSpec(9));
  driver.poll();
  for (let i = 0; i < 10; i++) driver.step();
  const wanted = [63, 0, 31].filter(
    (p) => !driver.core.hasPiece(9, p) && !driver.inFlight.some((a) => a.piece === p),
  );
  driver.core.prioritize(driver.nowMs, 9, wanted);
  const done = driver.inFlight[0]!;
  driver.report(done.transferId, 'verified');
  assert.equal(driver.poll()[0]?.piece, wanted[0], `seed ${seed}`);
});

test('a prioritized piece no host holds comes from the origin; held and bogus pieces are ignored', () => {
  const seed = 5;
  const driver = new Driver(makeConfig({ pieceCount: 64, randomSeed: seed, downloadsPerHostMax: 1 }), seed);
  driver.add(hostSpec(9), [1, 2]);
  driver.core.prioritize(0, 9, [2, -4, 1000, 50]);
  const [a] = driver.poll();
  assert.deepEqual([a!.piece, a!.from], [50, ORIGIN], `seed ${seed}`);
  driver.core.prioritize(0, 77, [3]);
});

test('a freed origin reader serves the pieces a host waits for before more first copies', () => {
  for (const seed of [1, 2, 3]) {
    // One host, every piece only at the origin, two readers and four slots: the host reads the
    // origin with two transfers and stays parked with free slots, where fillOrigin looks first.
    const config = makeConfig({
      pieceCount: 64,
      randomSeed: seed,
      downloadsPerHostMax: 4,
      originReadersMax: 2,
    });
    const driver = new Driver(config, seed);
    driver.add(hostSpec(9));
    const first = driver.poll();
    assert.deepEqual(
      first.map((a) => a.from),
      [ORIGIN, ORIGIN],
      `seed ${seed}`,
    );
    const wanted = [0, 1, 2, 3, 4, 5].filter((p) => !first.some((a) => a.piece === p)).slice(0, 2);
    driver.core.prioritize(driver.nowMs, 9, wanted);
    driver.report(first[0]!.transferId, 'verified');
    assert.deepEqual(
      driver.poll().map((a) => a.piece),
      [wanted[0]],
      `seed ${seed}: the freed reader went to a first copy instead`,
    );
  }
});
