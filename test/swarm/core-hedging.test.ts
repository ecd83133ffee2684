/** Hedged duplicate requests: only in a host's tail, from another parent; the loser is cancelled. */

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Driver, hostSpec, makeConfig, range } from './harness.js';

test('a host in its tail gets a hedge from another parent; the loser is cancelled', () => {
  for (const seed of [1, 2, 3]) {
    const pieces = 40;
    const driver = new Driver(
      makeConfig({ pieceCount: pieces, randomSeed: seed, hedgeTailPieces: 4, downloadsPerHostMax: 2 }),
    );
    driver.add(hostSpec(1, { seed: true }));
    driver.add(hostSpec(2, { seed: true }));
    driver.add(
      hostSpec(9),
      range(0, pieces).filter((p) => p !== 3),
    );
    const assigned = driver.poll();
    assert.equal(assigned.length, 2, `seed ${seed}`);
    const [original, hedge] = assigned;
    assert.deepEqual([original!.piece, original!.hedge], [3, false], `seed ${seed}`);
    assert.deepEqual([hedge!.piece, hedge!.hedge], [3, true], `seed ${seed}`);
    assert.notEqual(hedge!.from, original!.from, `seed ${seed}: a hedge comes from a different parent`);
    assert.equal(driver.core.stats.hedgesAssigned, 1);
    // The hedge wins: the original is the loser and must be cancelled.
    driver.core.handleTransfer(1, { transferId: hedge!.transferId, outcome: 'verified' });
    assert.deepEqual(driver.core.pollCancellations(), [original!.transferId], `seed ${seed}`);
    assert.deepEqual(driver.core.pollCancellations(), [], 'each cancellation is handed out once');
    assert.ok(driver.core.isComplete(9));
    driver.core.handleTransfer(2, { transferId: original!.transferId, outcome: 'cancelled' });
    assert.equal(driver.core.stats.transfersCancelled, 1);
    assert.deepEqual(driver.core.pollAssignments(3), [], `seed ${seed}: a complete host gets nothing more`);
  }
});

test('hedges appear only in the tail, and every race ends with the losers cancelled', () => {
  for (const seed of [1, 2, 3, 4]) {
    const pieces = 60;
    const tail = 4;
    const config = makeConfig({
      pieceCount: pieces,
      randomSeed: seed,
      hedgeTailPieces: tail,
      downloadsPerHostMax: 4,
    });
    const driver = new Driver(config, seed);
    driver.add(hostSpec(1, { seed: true }));
    driver.add(hostSpec(2, { seed: true }));
    for (let host = 10; host < 16; host++) driver.add(hostSpec(host));
    let hedges = 0;
    driver.poll();
    for (let steps = 0; steps < 10_000 && driver.inFlight.length > 0; steps++) {
      const done = driver.inFlight[driver.random.below(driver.inFlight.length)]!;
      driver.report(done.transferId, 'verified');
      const before = [...driver.inFlight];
      // Driver.poll reports every cancellation at once; after it no two copies of one piece remain.
      for (const a of driver.poll()) {
        if (!a.hedge) continue;
        hedges++;
        const lacking = pieces - driver.core.heldCount(a.host);
        assert.ok(lacking <= tail, `seed ${seed}: hedge for host ${a.host} lacking ${lacking} pieces`);
        const twin = before.find((b) => b.host === a.host && b.piece === a.piece && !b.hedge);
        assert.ok(twin !== undefined, `seed ${seed}: hedge of piece ${a.piece} with no original in flight`);
        assert.notEqual(twin.from, a.from, `seed ${seed}: hedge from the same parent`);
      }
      const stale = driver.inFlight.filter((a) => driver.core.hasPiece(a.host, a.piece));
      assert.deepEqual(stale, [], `seed ${seed}: transfers of pieces already verified were not cancelled`);
    }
    assert.equal(driver.core.stats.hostsComplete, 6, `seed ${seed}`);
    assert.ok(hedges > 0, `seed ${seed}: no hedges at all`);
    assert.equal(driver.core.stats.hedgesAssigned, hedges);
    assert.ok(hedges <= 6 * tail * 2, `seed ${seed}: ${hedges} hedges`);
  }
});

test('no hedges when hedgeTailPieces is 0', () => {
  const seed = 5;
  const driver = new Driver(makeConfig({ pieceCount: 30, randomSeed: seed }), seed);
  driver.add(hostSpec(1, { seed: true }));
  driver.add(hostSpec(2, { seed: true }));
  for (let host = 10; host < 14; host++) driver.add(hostSpec(host));
  assert.ok(driver.runUntilComplete([10, 11, 12, 13]) >= 0, `seed ${seed}`);
  assert.equal(driver.core.stats.hedgesAssigned, 0);
});
