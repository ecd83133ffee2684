/**
 * The core in ring mode (SwarmCore.setRing, handleHeld; src/swarm/core/ring-entries.ts): fed members
 * are planned only what their ring does not bring, a piece enters each ring once, and a member that
 * is no longer fed is planned as usual. Pushes are played by the test: a piece a member verifies is
 * handed to its ring child with handleHeld, as the agents' reports would.
 */

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ORIGIN, type Assignment } from '../../src/swarm/core/types.js';
import { Driver, hostSpec, makeConfig, range } from './harness.js';

/** Verifies every transfer in flight, then pushes each new piece around `ring` (ids in ring order). */
function settle(driver: Driver, ring: number[], stepsMax = 100_000): void {
  for (let steps = 0; steps < stepsMax; steps++) {
    driver.poll();
    if (driver.inFlight.length === 0) return;
    const done = driver.inFlight.shift() as Assignment;
    driver.report(done.transferId, 'verified');
    const at = ring.indexOf(done.host);
    if (at < 0) continue;
    // Round the ring from the member that got it: each next member holds it in turn.
    for (let hop = 1; hop < ring.length; hop++) {
      driver.core.handleHeld(driver.nowMs, ring[(at + hop) % ring.length]!, [done.piece]);
    }
  }
  assert.fail(`not settled in ${stepsMax} steps`);
}

test('fed members of one ring read each piece once from the origin and nothing from each other', () => {
  const seed = 21;
  const driver = new Driver(makeConfig({ pieceCount: 200, randomSeed: seed }), seed);
  const ring = [0, 1, 2, 3, 4];
  for (const host of ring) driver.add(hostSpec(host));
  for (const host of ring) driver.core.setRing(driver.nowMs, host, 0, true);
  settle(driver, ring);
  for (const host of ring) assert.equal(driver.core.isComplete(host), true, `seed ${seed}: host ${host}`);
  assert.ok(
    driver.log.every((a) => a.from === ORIGIN),
    `seed ${seed}: a fed member fetched from a peer`,
  );
  assert.deepEqual(
    driver.log.map((a) => a.piece).sort((a, b) => a - b),
    range(0, 200),
    `seed ${seed}: each piece read once`,
  );
  driver.core.checkInvariants();
});

test('a piece held only outside a ring enters it once, from a host outside it', () => {
  const seed = 22;
  const driver = new Driver(makeConfig({ pieceCount: 64, randomSeed: seed }), seed);
  driver.add(hostSpec(9), range(0, 64));
  const ring = [0, 1, 2];
  for (const host of ring) driver.add(hostSpec(host));
  for (const host of ring) driver.core.setRing(driver.nowMs, host, 0, true);
  assert.equal(driver.core.ringLacking(0), 64);
  settle(driver, ring);
  for (const host of ring) assert.equal(driver.core.isComplete(host), true, `seed ${seed}: host ${host}`);
  assert.ok(
    driver.log.every((a) => a.from === 9),
    `seed ${seed}: every entry from host 9`,
  );
  assert.equal(driver.log.length, 64, `seed ${seed}: each piece entered once`);
  assert.equal(driver.core.ringLacking(0), 0);
  driver.core.checkInvariants();
});

test('two rings: each piece enters each ring once; the origin sends it once', () => {
  const seed = 23;
  const pieces = 120;
  const driver = new Driver(makeConfig({ pieceCount: pieces, randomSeed: seed }), seed);
  const rings = [
    [0, 1, 2, 3],
    [4, 5, 6],
  ];
  for (const ring of rings) for (const host of ring) driver.add(hostSpec(host));
  rings.forEach((ring, id) => {
    for (const host of ring) driver.core.setRing(driver.nowMs, host, id, true);
  });
  for (let steps = 0; steps < 100_000; steps++) {
    driver.poll();
    if (driver.inFlight.length === 0) break;
    const done = driver.inFlight.shift() as Assignment;
    driver.report(done.transferId, 'verified');
    const ring = rings.find((members) => members.includes(done.host))!;
    const at = ring.indexOf(done.host);
    for (let hop = 1; hop < ring.length; hop++)
      driver.core.handleHeld(driver.nowMs, ring[(at + hop) % ring.length]!, [done.piece]);
    if (steps % 50 === 0) driver.core.checkInvariants();
  }
  for (let host = 0; host < 7; host++)
    assert.equal(driver.core.isComplete(host), true, `seed ${seed}: host ${host}`);
  const fromOrigin = driver.log.filter((a) => a.from === ORIGIN).length;
  assert.equal(fromOrigin, pieces, `seed ${seed}: the origin sent each piece once`);
  assert.equal(driver.log.length, 2 * pieces, `seed ${seed}: one entry per piece per ring`);
  driver.core.checkInvariants();
});

test('a member no longer fed (its link cut) is planned per piece again, from its peers', () => {
  const seed = 24;
  const driver = new Driver(makeConfig({ pieceCount: 32, randomSeed: seed }), seed);
  driver.add(hostSpec(0), range(0, 32));
  driver.add(hostSpec(1));
  driver.core.setRing(driver.nowMs, 1, 0, true);
  driver.core.setRing(driver.nowMs, 0, 0, true);
  assert.deepEqual(driver.poll(), [], 'its ring already holds every piece: nothing to plan');
  assert.equal(driver.core.isRingFed(1), true);
  driver.core.setRing(driver.nowMs, 1, 0, false);
  const assigned = driver.poll();
  assert.ok(assigned.length > 0 && assigned.every((a) => a.host === 1 && a.from === 0), `seed ${seed}`);
  assert.equal(driver.runUntilComplete([1]) >= 0, true, `seed ${seed}: host 1 completes`);
  driver.core.checkInvariants();
});

test('handleHeld counts pushed pieces, cancels a copy in flight, and ignores what it cannot use', () => {
  const seed = 25;
  const driver = new Driver(makeConfig({ pieceCount: 8, randomSeed: seed }), seed);
  driver.add(hostSpec(0), range(0, 8));
  driver.add(hostSpec(1));
  driver.poll();
  const first = driver.inFlight.find((a) => a.host === 1)!;
  driver.core.handleHeld(driver.nowMs, 1, [first.piece, first.piece, -1, 8, 2.5]);
  assert.equal(driver.core.hasPiece(1, first.piece), true);
  assert.equal(driver.core.heldCount(1), 1);
  assert.equal(
    driver.inFlight.some((a) => a.transferId === first.transferId),
    true,
    'the copy in flight is cancelled by the core and reported at the next poll',
  );
  driver.poll();
  assert.equal(
    driver.inFlight.some((a) => a.transferId === first.transferId),
    false,
  );
  driver.core.handleHeld(driver.nowMs, 7, [0]);
  driver.core.checkInvariants();
});

test('rings survive members leaving and coming back with what they held (invariants checked)', () => {
  for (const seed of [31, 32]) {
    const pieces = 300;
    const driver = new Driver(
      makeConfig({ pieceCount: pieces, randomSeed: seed, hedgeTailPieces: 2, downloadsPerHostMax: 3 }),
      seed,
    );
    const hosts = 10;
    for (let host = 0; host < hosts; host++) driver.add(hostSpec(host));
    const rings = range(0, hosts).map((host) => (host < 6 ? 0 : host < 9 ? 1 : -1));
    const ringOf = (host: number): number => rings[host]!;
    const members = (ring: number): number[] => range(0, hosts).filter((host) => ringOf(host) === ring);
    for (let host = 0; host < hosts; host++)
      driver.core.setRing(driver.nowMs, host, ringOf(host), ringOf(host) >= 0);
    // A member that joins is pushed its parent's backlog: here, everything its ring holds.
    const pushBacklog = (host: number): void => {
      const held = range(0, pieces).filter((piece) =>
        members(ringOf(host)).some((member) => driver.core.hasPiece(member, piece)),
      );
      driver.core.handleHeld(driver.nowMs, host, held);
    };
    for (let steps = 0; steps < 200_000; steps++) {
      driver.poll();
      if (range(0, hosts).every((host) => driver.core.isComplete(host))) break;
      if (driver.inFlight.length === 0) {
        assert.notEqual(driver.step(), undefined, `seed ${seed}: stalled after ${steps} steps`);
        continue;
      }
      const done = driver.inFlight[driver.random.below(driver.inFlight.length)]!;
      driver.report(done.transferId, driver.random.below(50) === 0 ? 'failed' : 'verified');
      const ring = ringOf(done.host);
      if (ring >= 0 && driver.core.hasPiece(done.host, done.piece)) {
        const list = members(ring);
        const at = list.indexOf(done.host);
        for (let hop = 1; hop < list.length; hop++)
          driver.core.handleHeld(driver.nowMs, list[(at + hop) % list.length]!, [done.piece]);
      }
      if (steps === 400) {
        const kept = range(0, pieces).filter((piece) => driver.core.hasPiece(4, piece));
        driver.removeHost(4);
        driver.core.checkInvariants();
        driver.add(hostSpec(4), kept);
        driver.core.setRing(driver.nowMs, 4, 0, true);
        pushBacklog(4);
      }
      if (steps === 700) driver.core.setRing(driver.nowMs, 7, 1, false);
      if (steps === 900) {
        rings[9] = 1;
        driver.core.setRing(driver.nowMs, 9, 1, true);
        pushBacklog(9);
      }
      if (steps % 200 === 0) driver.core.checkInvariants();
    }
    driver.core.checkInvariants();
    for (let host = 0; host < hosts; host++)
      assert.equal(driver.core.isComplete(host), true, `seed ${seed}: host ${host} incomplete`);
  }
});

test('chains: fed members take no first copies; the chain’s head, fed by nobody, reads every piece from the origin', () => {
  const seed = 26;
  const driver = new Driver(
    makeConfig({ pieceCount: 100, randomSeed: seed, ringChain: true, originReadersPerHostMax: 4 }),
    seed,
  );
  const chain = [0, 1, 2, 3];
  for (const host of chain) driver.add(hostSpec(host));
  driver.core.setRing(driver.nowMs, 0, 0, false);
  for (const host of chain.slice(1)) driver.core.setRing(driver.nowMs, host, 0, true);
  const first = driver.poll();
  assert.equal(first.length, 4, `seed ${seed}: the head takes all four origin readers`);
  for (let steps = 0; steps < 10_000; steps++) {
    driver.poll();
    if (driver.inFlight.length === 0) break;
    const done = driver.inFlight.shift() as Assignment;
    driver.report(done.transferId, 'verified');
    // The head passes each piece down the chain.
    for (const host of chain.slice(1)) driver.core.handleHeld(driver.nowMs, host, [done.piece]);
  }
  for (const host of chain) assert.equal(driver.core.isComplete(host), true, `seed ${seed}: host ${host}`);
  assert.ok(
    driver.log.every((a) => a.host === 0 && a.from === ORIGIN),
    `seed ${seed}: only the head read, and only from the origin`,
  );
  assert.equal(driver.log.length, 100);
  driver.core.checkInvariants();
});
