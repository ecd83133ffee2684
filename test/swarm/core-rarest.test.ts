/**
 * SwarmCore picks the rarest piece a host lacks that some free parent holds, with random tie-breaks.
 * That is how every slot the ring pairings (core-ring.test.ts) leave free is filled, so these swarms
 * run with the ring off (ringParents: 0) to see the choice on its own.
 */

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Driver, hostSpec, makeConfig, range } from './harness.js';

const PIECES = 48;

/**
 * Hosts 0..3 with known maps: piece p is held by hosts 0..(p % 4), so it has 1 + (p % 4) copies and
 * every piece is held somewhere (the origin has nothing to add).
 */
function knownSwarm(seed: number, overrides: Parameters<typeof makeConfig>[0] = {}): Driver {
  // Upload slots to spare, so hosts 1..3 fetching from host 0 leave it free for the newcomer.
  const config = makeConfig({
    pieceCount: PIECES,
    randomSeed: seed,
    uploadsPerHostMax: 64,
    ringParents: 0,
    ...overrides,
  });
  const driver = new Driver(config);
  for (let host = 0; host < 4; host++) {
    driver.add(
      hostSpec(host),
      range(0, PIECES).filter((p) => p % 4 >= host),
    );
  }
  driver.poll();
  return driver;
}

test('a new host gets the rarest pieces it lacks, whatever the seed', () => {
  for (let seed = 1; seed <= 10; seed++) {
    const driver = knownSwarm(seed);
    driver.add(hostSpec(9));
    const assigned = driver.poll();
    assert.equal(assigned.length, 4, `seed ${seed}: the free download slots are filled`);
    for (const a of assigned) {
      assert.equal(a.piece % 4, 0, `seed ${seed}: piece ${a.piece} has ${1 + (a.piece % 4)} copies, not 1`);
      assert.equal(a.from, 0, `seed ${seed}: only host 0 holds piece ${a.piece}`);
      assert.equal(a.hedge, false);
    }
  }
});

test('pieces the host holds or has in flight are not chosen again; the next rarest follow', () => {
  for (let seed = 1; seed <= 10; seed++) {
    const driver = knownSwarm(seed, { downloadsPerHostMax: 8 });
    // Host 9 holds all but two of the 1-copy pieces.
    const ones = range(0, PIECES).filter((p) => p % 4 === 0);
    driver.add(hostSpec(9), ones.slice(2));
    const assigned = driver.poll();
    const pieces = assigned.map((a) => a.piece);
    assert.equal(new Set(pieces).size, pieces.length, `seed ${seed}: a piece was assigned twice`);
    const copies = pieces.map((p) => driver.core.copies(p)).sort((a, b) => a - b);
    assert.deepEqual(copies, [1, 1, 2, 2, 2, 2, 2, 2], `seed ${seed}: pieces ${pieces.join(',')}`);
  }
});

test('tie-breaks vary with the seed and do not follow file order', () => {
  const firstPieces: number[] = [];
  const orders: string[] = [];
  for (let seed = 1; seed <= 12; seed++) {
    const driver = knownSwarm(seed, { downloadsPerHostMax: 6 });
    driver.add(hostSpec(9));
    const pieces = driver.poll().map((a) => a.piece);
    firstPieces.push(pieces[0]!);
    orders.push(pieces.join(','));
    assert.notDeepEqual(
      pieces,
      range(0, 6).map((i) => i * 4),
      `seed ${seed}: file order ${pieces.join(',')}`,
    );
  }
  const ascending = orders.filter(
    (o) =>
      o ===
      o
        .split(',')
        .map(Number)
        .sort((a, b) => a - b)
        .join(','),
  );
  assert.ok(ascending.length <= 2, `sequences in ascending order: ${ascending.join(' | ')}`);
  assert.ok(new Set(firstPieces).size >= 4, `first pieces over 12 seeds: ${firstPieces.join(',')}`);
  assert.ok(
    new Set(orders).size === orders.length,
    `two seeds chose the same sequence: ${orders.join(' | ')}`,
  );
});

/**
 * The oracle: when an assignment from a peer is made, no piece with fewer copies that the host
 * lacks (and has not in flight) had a holder with a free upload slot. Checked for every assignment
 * of random swarms driven to completion, in the order the core made them within each poll.
 */
test('every assignment is among the rarest pieces the host lacks and a free parent holds', () => {
  for (const seed of Array.from({ length: 40 }, (_, i) => i + 1)) {
    const hosts = 10;
    const pieces = 40;
    const config = makeConfig({
      pieceCount: pieces,
      randomSeed: seed,
      downloadsPerHostMax: 2,
      uploadsPerHostMax: 2,
      ringParents: 0,
    });
    const driver = new Driver(config, seed);
    for (let host = 0; host < hosts; host++) {
      driver.add(
        hostSpec(host),
        range(0, pieces).filter(() => driver.random.below(3) === 0),
      );
    }
    const uploadsOf = (parent: number, extra: readonly { from: number }[]): number =>
      driver.inFlight.filter((a) => a.from === parent).length + extra.filter((a) => a.from === parent).length;
    let checked = 0;
    for (let steps = 0; steps < 5000 && !range(0, hosts).every((h) => driver.core.isComplete(h)); steps++) {
      const before = [...driver.inFlight];
      const done = before.length > 0 ? before[driver.random.below(before.length)]! : undefined;
      if (done !== undefined) driver.report(done.transferId, 'verified');
      const pending = driver.inFlight.slice();
      const assigned = driver.core.pollAssignments(driver.nowMs);
      for (let k = 0; k < assigned.length; k++) {
        const a = assigned[k]!;
        if (a.from < 0) continue;
        const earlier = [...pending, ...assigned.slice(0, k)];
        const copies = driver.core.copies(a.piece);
        for (let piece = 0; piece < pieces; piece++) {
          if (driver.core.hasPiece(a.host, piece) || driver.core.copies(piece) >= copies) continue;
          if (earlier.some((e) => e.host === a.host && e.piece === piece)) continue;
          const freeHolder = range(0, hosts).find(
            (u) => u !== a.host && driver.core.hasPiece(u, piece) && uploadsOf(u, assigned.slice(0, k)) < 2,
          );
          assert.equal(
            freeHolder,
            undefined,
            `seed ${seed}: host ${a.host} got piece ${a.piece} (${copies} copies) while piece ${piece} ` +
              `(${driver.core.copies(piece)} copies) was free at host ${freeHolder}`,
          );
        }
        checked++;
      }
      for (const a of assigned) {
        driver.inFlight.push(a);
        driver.log.push(a);
      }
    }
    assert.ok(
      range(0, hosts).every((h) => driver.core.isComplete(h)),
      `seed ${seed}: swarm did not complete`,
    );
    assert.ok(checked > 100, `seed ${seed}: only ${checked} assignments checked`);
  }
});

test('a host holding more of the rarest pieces than a walk may skip still takes what parents offer', () => {
  for (const seed of [1, 2, 3]) {
    // Host 1 alone holds pieces 0..1999 (one copy each: the rarest); hosts 2 and 3 hold 2000..2999.
    // Host 1's walk skips its own 2000 rarest pieces and gives up before it reaches what it lacks.
    const config = makeConfig({ pieceCount: 3000, randomSeed: seed, downloadsPerHostMax: 2, ringParents: 0 });
    const driver = new Driver(config, seed);
    driver.add(hostSpec(1), range(0, 2000));
    driver.add(hostSpec(2), range(2000, 3000));
    driver.add(hostSpec(3), range(2000, 3000));
    driver.poll();
    for (let i = 0; i < 40; i++) driver.step();
    // Its two slots are about a third of the six in flight; a host that refused offers took none.
    const taken = driver.log.filter((a) => a.host === 1).length;
    assert.ok(taken >= 8, `seed ${seed}: host 1 took only ${taken} pieces in 40 steps`);
  }
});
