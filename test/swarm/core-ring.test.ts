/** Ring pairings (SwarmConfig.ringParents): each host asks its next K hosts by id first. */

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ORIGIN } from '../../src/swarm/core/types.js';
import { Driver, hostSpec, makeConfig, range } from './harness.js';

test('ringParents: a host takes one piece from each of its next K hosts by id before anyone else', () => {
  for (const seed of [1, 2, 3, 4]) {
    const config = makeConfig({ pieceCount: 64, randomSeed: seed, downloadsPerHostMax: 4, ringParents: 2 });
    const driver = new Driver(config, seed);
    // Hosts 1-4 hold every piece; host 0 holds nothing. Host 0's ring is hosts 1 and 2.
    for (const id of [1, 2, 3, 4]) driver.add(hostSpec(id), range(0, 64));
    driver.add(hostSpec(0));
    const first = driver.poll().filter((a) => a.host === 0);
    assert.equal(first.length, 4, `seed ${seed}`);
    assert.deepEqual(
      first.slice(0, 2).map((a) => a.from),
      [1, 2],
      `seed ${seed}: the ring parents come first, one live transfer each`,
    );
    assert.ok(
      first.slice(2).every((a) => a.from !== ORIGIN),
      `seed ${seed}: the other slots are filled the usual way`,
    );
    driver.core.checkInvariants();
    assert.ok(driver.runUntilComplete([0]) >= 0, `seed ${seed}: stalled`);
    driver.core.checkInvariants();
  }
});

test('ringParents: the ring skips absent hosts and wraps around; a parent with nothing new is passed over', () => {
  const config = makeConfig({ pieceCount: 32, ringParents: 2, downloadsPerHostMax: 2 });
  const driver = new Driver(config, 5);
  // Ids 0, 2, 5: host 5's ring wraps to 0 and 2. Host 0 holds nothing host 5 lacks.
  driver.add(hostSpec(0), range(0, 8));
  driver.add(hostSpec(2), range(0, 32));
  driver.add(hostSpec(5), range(0, 8));
  const toFive = driver.poll().filter((a) => a.host === 5);
  assert.equal(toFive.length, 2);
  assert.equal(toFive[0]!.from, 2, 'host 0 has nothing host 5 lacks, so its ring gives host 2');
  assert.ok(toFive.every((a) => a.piece >= 8));
  driver.core.checkInvariants();
});

test('ringParents must be a non-negative integer', () => {
  assert.throws(() => new Driver(makeConfig({ ringParents: -1 })), /ringParents/);
  assert.throws(() => new Driver(makeConfig({ ringParents: 1.5 })), /ringParents/);
});

test('ringParents: a host with a rack label rings with its rack-mates only', () => {
  for (const seed of [1, 2, 3]) {
    const config = makeConfig({ pieceCount: 32, randomSeed: seed, downloadsPerHostMax: 2, ringParents: 1 });
    const driver = new Driver(config, seed);
    driver.add(hostSpec(1, { zone: 'z', rack: 'b' }), range(0, 32));
    driver.add(hostSpec(2, { zone: 'z', rack: 'a' }), range(0, 32));
    driver.add(hostSpec(3, { zone: 'z', rack: 'b' }), range(0, 32));
    driver.add(hostSpec(0, { zone: 'z', rack: 'a' }));
    const toZero = driver.poll().filter((a) => a.host === 0);
    assert.equal(toZero[0]?.from, 2, `seed ${seed}: host 1 is next by id but in another rack`);
    driver.core.checkInvariants();
  }
});

test('ringParents: a host with only a zone label rings with its zone-mates', () => {
  const config = makeConfig({ pieceCount: 32, downloadsPerHostMax: 2, ringParents: 1 });
  const driver = new Driver(config, 3);
  driver.add(hostSpec(1, { zone: 'b' }), range(0, 32));
  driver.add(hostSpec(2, { zone: 'a' }), range(0, 32));
  driver.add(hostSpec(0, { zone: 'a' }));
  assert.equal(driver.poll().filter((a) => a.host === 0)[0]?.from, 2, 'host 1 is next by id but in zone b');
});

test('ringParents: the ring parent gives the rarest piece it holds that the host lacks', () => {
  for (const seed of [1, 2, 3, 4, 5]) {
    const config = makeConfig({ pieceCount: 64, randomSeed: seed, downloadsPerHostMax: 1, ringParents: 1 });
    const driver = new Driver(config, seed);
    // Host 1 (host 0's ring parent) holds everything; hosts 2-4 hold every piece but 40, so piece 40
    // has one copy and every other piece four.
    driver.add(hostSpec(1), range(0, 64));
    for (const id of [2, 3, 4])
      driver.add(
        hostSpec(id),
        range(0, 64).filter((p) => p !== 40),
      );
    driver.add(hostSpec(0));
    const toZero = driver.poll().filter((a) => a.host === 0);
    assert.deepEqual(
      toZero.map((a) => [a.from, a.piece]),
      [[1, 40]],
      `seed ${seed}`,
    );
  }
});

test('ringParents: a ring parent that sent corrupt bytes is left for the scored choice', () => {
  for (const seed of [1, 2, 3]) {
    const config = makeConfig({ pieceCount: 32, randomSeed: seed, downloadsPerHostMax: 1, ringParents: 1 });
    const driver = new Driver(config, seed);
    driver.add(hostSpec(1), range(0, 32));
    driver.add(hostSpec(2), range(0, 32));
    driver.add(hostSpec(0));
    const first = driver.poll().find((a) => a.host === 0);
    assert.equal(first?.from, 1, `seed ${seed}: host 1 is host 0's ring parent`);
    driver.report(first.transferId, 'corrupt');
    for (let i = 0; i < 31 && driver.inFlight.length > 0; i++) {
      const next = driver.inFlight.find((a) => a.host === 0);
      assert.ok(next !== undefined, `seed ${seed}: host 0 waits for nothing`);
      assert.equal(next.from, 2, `seed ${seed}: the corrupt ring parent was asked again`);
      driver.report(next.transferId, 'verified');
      driver.poll();
    }
    driver.core.checkInvariants();
  }
});

test('ringParents: a host reading the origin has one more slot, for a ring parent only', () => {
  for (const seed of [1, 2, 3]) {
    const config = makeConfig({
      pieceCount: 64,
      randomSeed: seed,
      downloadsPerHostMax: 2,
      ringParents: 2,
      originReadersMax: 1,
    });
    const driver = new Driver(config, seed);
    // Hosts 1 and 2 (host 0's ring) and 5 hold pieces 0-31; 32-63 are only at the origin.
    for (const id of [1, 2, 5]) driver.add(hostSpec(id), range(0, 32));
    driver.add(hostSpec(0));
    const toZero = driver.poll().filter((a) => a.host === 0);
    assert.deepEqual(
      toZero.map((a) => a.from),
      [ORIGIN, 1, 2],
      `seed ${seed}: the origin, then both ring parents, the second in the extra slot`,
    );
    // Once the origin transfer is done, the host is back to two slots: nothing new.
    driver.report(toZero[0]!.transferId, 'verified');
    assert.deepEqual(
      driver.poll().filter((a) => a.host === 0),
      [],
      `seed ${seed}: a third transfer without the origin`,
    );
    driver.core.checkInvariants();
  }
});
