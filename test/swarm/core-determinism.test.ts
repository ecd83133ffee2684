/** One seed replays a whole run: same seed, same assignments; another seed, other assignments. */

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Driver, hostSpec, makeConfig, range } from './harness.js';

function run(coreSeed: number): string[] {
  const config = makeConfig({
    pieceCount: 100,
    randomSeed: coreSeed,
    hedgeTailPieces: 3,
    originReadersMax: 3,
  });
  const driver = new Driver(config, 99);
  for (let host = 0; host < 10; host++)
    driver.add(hostSpec(host, { zone: `z${host % 2}`, rack: `r${host % 4}` }));
  assert.ok(driver.runUntilComplete(range(0, 10)) >= 0, `seed ${coreSeed}: stalled`);
  return driver.log.map((a) => `${a.transferId}:${a.host}<${a.from}:${a.piece}${a.hedge ? 'h' : ''}`);
}

test('the same seed gives the same assignment sequence', () => {
  for (const seed of [1, 12345, 2 ** 31 + 7]) {
    const a = run(seed);
    const b = run(seed);
    assert.equal(a.length, b.length, `seed ${seed}`);
    const first = a.findIndex((x, i) => x !== b[i]);
    assert.equal(first, -1, `seed ${seed}: runs diverge at assignment ${first}: ${a[first]} vs ${b[first]}`);
  }
});

test('a different seed gives a different sequence', () => {
  const a = run(1);
  const b = run(2);
  assert.notDeepEqual(a.slice(0, 50), b.slice(0, 50), 'seeds 1 and 2 gave the same first 50 assignments');
});
