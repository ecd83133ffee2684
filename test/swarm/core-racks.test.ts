/** Rack crossings (core/racks.ts): a piece enters a rack once, and few enter a rack at once. */

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { RackCrossings, RACK_ENTRIES_BEYOND_READERS } from '../../src/swarm/core/racks.js';
import { Random } from '../../src/swarm/core/random.js';
import { RarityIndex } from '../../src/swarm/core/rarity.js';
import { ORIGIN, type Assignment, type HostSpec } from '../../src/swarm/core/types.js';
import { Driver, hostSpec, makeConfig, range } from './harness.js';

/** Host `id` in rack `rack-<rack>` of zone `z`. */
function racked(id: number, rack: number, overrides: Partial<HostSpec> = {}): HostSpec {
  return hostSpec(id, { zone: 'z', rack: `rack-${rack}`, ...overrides });
}

/** Assignments of `log` that bring a piece into the rack of their host from outside it. */
function entries(log: readonly Assignment[], rackOf: (host: number) => number): Assignment[] {
  return log.filter((a) => a.from === ORIGIN || rackOf(a.from) !== rackOf(a.host));
}

test('racks: while the origin sends, every piece enters every rack once, from the origin or from another rack', () => {
  for (const seed of [1, 2, 3, 4]) {
    const pieces = 96;
    const config = makeConfig({ pieceCount: pieces, randomSeed: seed, originReadersMax: 4 });
    const driver = new Driver(config, seed);
    // 3 racks of 4 hosts, nothing held: every piece starts at the origin.
    const rackOf = (host: number): number => host % 3;
    for (let id = 0; id < 12; id++) driver.add(racked(id, rackOf(id)));
    const entered = new Map<string, number>();
    let sending = true;
    let seen = 0;
    driver.poll();
    for (let steps = 1; ; steps++) {
      for (const a of entries(driver.log.slice(seen), rackOf)) {
        const key = `${rackOf(a.host)}:${a.piece}`;
        assert.ok(
          !sending || !entered.has(key),
          `seed ${seed}: piece ${a.piece} entered rack ${rackOf(a.host)} again`,
        );
        entered.set(key, (entered.get(key) ?? 0) + 1);
      }
      seen = driver.log.length;
      if (range(0, 12).every((h) => driver.core.isComplete(h))) break;
      assert.ok(driver.inFlight.length > 0, `seed ${seed}: stalled`);
      const done = driver.inFlight[driver.random.below(driver.inFlight.length)]!;
      driver.report(done.transferId, 'verified');
      sending = range(0, pieces).some((piece) => driver.core.copies(piece) === 0);
      driver.poll();
      if (steps % 64 === 0) driver.core.checkInvariants();
    }
    driver.core.checkInvariants();
    assert.equal(entered.size, 3 * pieces, `seed ${seed}: every piece entered every rack`);
  }
});

test('racks: at most originReadersMax + 1 pieces are on their way into a rack at once', () => {
  for (const seed of [1, 2, 3]) {
    const readers = 2;
    const config = makeConfig({ pieceCount: 64, randomSeed: seed, originReadersMax: readers });
    const driver = new Driver(config, seed);
    // Rack 0: 8 hosts holding nothing; rack 1: 2 hosts holding everything.
    const rackOf = (host: number): number => (host < 8 ? 0 : 1);
    for (let id = 8; id < 10; id++) driver.add(racked(id, 1), range(0, 64));
    for (let id = 0; id < 8; id++) driver.add(racked(id, 0));
    driver.poll();
    let most = 0;
    while (!range(0, 8).every((h) => driver.core.isComplete(h))) {
      const entering = entries(driver.inFlight, rackOf).length;
      most = Math.max(most, entering);
      assert.ok(
        entering <= readers + RACK_ENTRIES_BEYOND_READERS,
        `seed ${seed}: ${entering} pieces on their way into rack 0`,
      );
      assert.ok(driver.step() !== undefined, `seed ${seed}: stalled`);
    }
    assert.equal(most, readers + RACK_ENTRIES_BEYOND_READERS, `seed ${seed}: the bound was never reached`);
    driver.core.checkInvariants();
  }
});

test('racks: a host waits for a piece a rack-mate is being sent from another rack, and takes it from that rack-mate', () => {
  for (const seed of [1, 2, 3]) {
    const config = makeConfig({ pieceCount: 1, randomSeed: seed, downloadsPerHostMax: 1, ringParents: 0 });
    const driver = new Driver(config, seed);
    driver.add(racked(2, 1), [0]);
    driver.add(racked(0, 0));
    const first = driver.poll();
    assert.deepEqual(
      first.map((a) => [a.host, a.from]),
      [[0, 2]],
      `seed ${seed}: host 0 fetches the piece from rack 1`,
    );
    driver.add(racked(1, 0));
    assert.deepEqual(driver.poll(), [], `seed ${seed}: host 1 waits: the piece is on its way into its rack`);
    driver.report(first[0]!.transferId, 'verified');
    assert.deepEqual(
      driver.poll().map((a) => [a.host, a.from]),
      [[1, 0]],
      `seed ${seed}: host 1 takes it from its rack-mate`,
    );
    driver.core.checkInvariants();
  }
});

/** Piece 4 is only at the origin (so it is still sending); hosts 1 (rack 0) and 2 (rack 1) hold 0-3. */
function originStillSending(seed: number, overrides: Parameters<typeof makeConfig>[0]): Driver {
  const config = makeConfig({
    pieceCount: 5,
    randomSeed: seed,
    originReadersMax: 1,
    ringParents: 0,
    ...overrides,
  });
  const driver = new Driver(config, seed);
  driver.add(racked(1, 0), range(0, 4));
  driver.add(racked(2, 1), range(0, 4));
  return driver;
}

test('racks: while the origin sends, a host waits for its busy rack-mate rather than cross, unless it banned it', () => {
  for (const seed of [1, 2, 3]) {
    const driver = originStillSending(seed, { downloadsPerHostMax: 2, uploadsPerHostMax: 1 });
    driver.add(racked(0, 0));
    driver.add(racked(3, 0));
    const first = driver.poll();
    assert.deepEqual(
      first.map((a) => a.from).sort(),
      [ORIGIN, 1].sort(),
      `seed ${seed}: the origin's first copy and the rack-mate's one upload slot; nothing from rack 1`,
    );
    const fromMate = first.find((a) => a.from === 1)!;
    driver.report(fromMate.transferId, 'corrupt');
    const next = driver.poll().filter((a) => a.host === fromMate.host);
    assert.deepEqual(
      next.map((a) => a.from),
      [2],
      `seed ${seed}: having banned its rack-mate, host ${fromMate.host} fetches from rack 1`,
    );
    driver.core.checkInvariants();
  }
});

test('racks: while the origin sends, a demoted rack-mate does not keep a host from another rack', () => {
  for (const seed of [1, 2, 3]) {
    const driver = originStillSending(seed, { downloadsPerHostMax: 2 });
    driver.add(racked(0, 0));
    const first = driver.poll();
    assert.deepEqual(first.map((a) => a.from).sort(), [ORIGIN, 1].sort(), `seed ${seed}`);
    let fromMate = first.find((a) => a.from === 1)!;
    for (let failures = 1; failures <= 2; failures++) {
      driver.report(fromMate.transferId, 'failed');
      const [next] = driver.poll();
      if (failures === 2) {
        assert.ok(driver.core.isDemoted(1), `seed ${seed}: two failures demote host 1`);
        assert.equal(next?.from, 2, `seed ${seed}: host 0 goes to rack 1`);
      } else {
        assert.equal(next?.from, 1, `seed ${seed}: host 1 is not demoted yet`);
        fromMate = next;
      }
    }
    driver.core.checkInvariants();
  }
});

test('racks: a piece a loader waits for may come from another rack while a rack-mate is being sent it', () => {
  for (const seed of [1, 2, 3]) {
    const config = makeConfig({ pieceCount: 4, randomSeed: seed, downloadsPerHostMax: 2, ringParents: 0 });
    const driver = new Driver(config, seed);
    driver.add(racked(2, 1), range(0, 4));
    driver.add(racked(3, 1), range(0, 4));
    driver.add(racked(0, 0));
    const toZero = driver.poll().filter((a) => a.host === 0);
    assert.equal(toZero.length, 2, `seed ${seed}`);
    const coming = toZero[0]!.piece;
    driver.add(racked(1, 0));
    driver.core.prioritize(driver.nowMs, 1, [coming]);
    const toOne = driver.poll().filter((a) => a.host === 1);
    assert.ok(
      toOne.some((a) => a.piece === coming && (a.from === 2 || a.from === 3)),
      `seed ${seed}: host 1 got ${JSON.stringify(toOne)}`,
    );
    driver.core.checkInvariants();
  }
});

test('racks: hosts with a zone label but no rack label fetch from any zone at once, as before', () => {
  for (const seed of [1, 2]) {
    const readers = 1;
    const config = makeConfig({
      pieceCount: 64,
      randomSeed: seed,
      originReadersMax: readers,
      ringParents: 0,
    });
    const driver = new Driver(config, seed);
    driver.add(hostSpec(8, { zone: 'b' }), range(0, 64));
    driver.add(hostSpec(9, { zone: 'b' }), range(0, 64));
    for (let id = 0; id < 4; id++) driver.add(hostSpec(id, { zone: 'a' }));
    const across = driver.poll().filter((a) => a.from >= 8);
    assert.equal(across.length, 8, `seed ${seed}: every upload slot of zone b in use`);
    driver.core.checkInvariants();
  }
});

test('RackCrossings: pieces on their way into a rack are counted per transfer', () => {
  const crossings = new RackCrossings(2, new RarityIndex(1, 4, new Random(1)));
  assert.equal(crossings.hasRoom(5), true);
  crossings.start(5, 7);
  crossings.start(5, 7);
  crossings.start(5, 9);
  assert.equal(crossings.entering(5), 3);
  assert.equal(crossings.comingCount(5, 7), 2);
  assert.equal(crossings.isComing(5, 9), true);
  assert.equal(crossings.isComing(4, 9), false);
  assert.equal(crossings.hasRoom(5), false, '2 readers + 1');
  crossings.finish(5, 7);
  assert.equal(crossings.hasRoom(5), true);
  assert.equal(crossings.comingCount(5, 7), 1);
  crossings.finish(5, 7);
  crossings.finish(5, 9);
  assert.equal(crossings.entering(5), 0);
  assert.throws(() => crossings.finish(5, 9), /not on its way/);
  for (let i = 0; i < 100; i++) crossings.start(1, i);
  assert.equal(crossings.entering(1), 100, 'the list grows');
});
