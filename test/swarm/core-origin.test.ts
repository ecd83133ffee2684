/** The origin sends first copies only, each piece to one transfer at a time, spread over many hosts. */

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ORIGIN, type Assignment } from '../../src/swarm/core/types.js';
import { Driver, hostSpec, makeConfig, PIECE_BYTES, range } from './harness.js';

/** Checks, for one poll's assignments, the origin rules against the state before them. */
function checkOriginRules(
  driver: Driver,
  before: readonly Assignment[],
  assigned: readonly Assignment[],
  label: string,
): void {
  const fromOrigin = new Set(before.filter((a) => a.from === ORIGIN).map((a) => a.piece));
  for (const a of assigned) {
    if (a.from !== ORIGIN) continue;
    assert.equal(
      driver.core.copies(a.piece),
      0,
      `${label}: origin sent piece ${a.piece}, which a host holds`,
    );
    if (!a.hedge)
      assert.ok(!fromOrigin.has(a.piece), `${label}: piece ${a.piece} twice from the origin at once`);
    fromOrigin.add(a.piece);
  }
}

test('20 hosts x 200 pieces, random completion order: first copies only, origin bytes within 1.05 x', () => {
  for (const seed of [1, 2, 3, 4, 5]) {
    const config = makeConfig({ pieceCount: 200, randomSeed: seed, originReadersMax: 4, hedgeTailPieces: 2 });
    const driver = new Driver(config, seed);
    for (let host = 0; host < 20; host++) driver.add(hostSpec(host));
    let originInFlightMax = 0;
    let steps = 0;
    for (; steps < 100_000 && driver.core.stats.hostsComplete < 20; steps++) {
      const before = [...driver.inFlight];
      const assigned = driver.poll();
      checkOriginRules(driver, before, assigned, `seed ${seed} step ${steps}`);
      originInFlightMax = Math.max(
        originInFlightMax,
        driver.inFlight.filter((a) => a.from === ORIGIN).length,
      );
      if (driver.inFlight.length === 0) break;
      const done = driver.inFlight[driver.random.below(driver.inFlight.length)]!;
      driver.report(done.transferId, 'verified');
    }
    assert.equal(driver.core.stats.hostsComplete, 20, `seed ${seed}: stalled after ${steps} steps`);
    const ratio = driver.core.stats.originBytesAssigned / config.totalBytes;
    assert.ok(ratio >= 1 && ratio <= 1.05, `seed ${seed}: origin bytes ${ratio.toFixed(3)} x total`);
    assert.ok(originInFlightMax <= 4, `seed ${seed}: ${originInFlightMax} origin transfers at once`);
  }
});

test('first copies fan out: one origin transfer per host when hosts outnumber readers', () => {
  for (const seed of [1, 2, 3]) {
    const driver = new Driver(makeConfig({ pieceCount: 100, randomSeed: seed, originReadersMax: 8 }), seed);
    for (let host = 0; host < 50; host++) driver.add(hostSpec(host));
    const assigned = driver.poll();
    const origin = assigned.filter((a) => a.from === ORIGIN);
    assert.equal(origin.length, 8, `seed ${seed}: the origin is kept at its reader limit`);
    assert.equal(
      new Set(origin.map((a) => a.host)).size,
      8,
      `seed ${seed}: first copies go to 8 different hosts`,
    );
    assert.equal(new Set(origin.map((a) => a.piece)).size, 8, `seed ${seed}`);
  }
});

test('with few hosts the origin is still kept busy', () => {
  const seed = 4;
  const driver = new Driver(makeConfig({ pieceCount: 100, randomSeed: seed, originReadersMax: 8 }), seed);
  driver.add(hostSpec(0));
  driver.add(hostSpec(1));
  const origin = driver.poll().filter((a) => a.from === ORIGIN);
  assert.equal(origin.length, 8, `seed ${seed}: ${origin.length} origin transfers`);
  assert.deepEqual(
    [0, 1].map((h) => origin.filter((a) => a.host === h).length),
    [4, 4],
    `seed ${seed}: the readers are shared between the hosts`,
  );
});

test('with many hosts the origin stays at its reader limit while first copies remain', () => {
  const seed = 6;
  const config = makeConfig({ pieceCount: 400, randomSeed: seed, originReadersMax: 6 });
  const driver = new Driver(config, seed);
  for (let host = 0; host < 60; host++) driver.add(hostSpec(host));
  driver.poll();
  let polls = 0;
  let full = 0;
  while (driver.core.stats.hostsComplete < 60 && driver.inFlight.length > 0) {
    const unserved = range(0, 400).filter(
      (p) => driver.core.copies(p) === 0 && !driver.inFlight.some((a) => a.piece === p && a.from === ORIGIN),
    ).length;
    if (unserved > 0) {
      polls++;
      if (driver.inFlight.filter((a) => a.from === ORIGIN).length === 6) full++;
    }
    driver.step();
  }
  assert.equal(driver.core.stats.hostsComplete, 60, `seed ${seed}`);
  assert.ok(
    full / polls > 0.95,
    `seed ${seed}: origin full in only ${full} of ${polls} polls with work left`,
  );
  assert.ok(driver.core.stats.originBytesAssigned <= 1.05 * 400 * PIECE_BYTES, `seed ${seed}`);
});

test('hosts take turns with the origin: the host whose first copy just landed does not keep it', () => {
  for (const seed of [1, 2, 3]) {
    const hosts = 40;
    const pieces = 1200;
    const config = makeConfig({ pieceCount: pieces, randomSeed: seed, originReadersMax: 4 });
    const driver = new Driver(config, seed);
    for (let host = 0; host < hosts; host++) driver.add(hostSpec(host));
    assert.ok(driver.runUntilComplete(range(0, hosts)) >= 0, `seed ${seed}: stalled`);
    const perHost = range(0, hosts).map(
      (h) => driver.log.filter((a) => a.from === ORIGIN && a.host === h).length,
    );
    // A fair share is 30 each; without turns some hosts took 60 to 80 and others 6 to 11.
    const fair = pieces / hosts;
    assert.ok(Math.max(...perHost) <= 1.5 * fair, `seed ${seed}: a host took ${Math.max(...perHost)}`);
    assert.ok(Math.min(...perHost) >= 0.5 * fair, `seed ${seed}: a host took only ${Math.min(...perHost)}`);
  }
});
