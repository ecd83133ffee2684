/**
 * A host blamed for corrupt uploads (accused by enough hosts, or banned: parent-score.ts
 * `blamedForUploads`) takes no first copies from the origin while a host in good standing
 * downloads, holds no ring parent's slot and plans at most two downloads; the origin sends each
 * piece once but for what that host got from it before the blame. One that a re-check clears is
 * planned as any other again.
 */

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ORIGIN, type Assignment } from '../../src/swarm/core/types.js';
import { Driver, hostSpec, makeConfig, range } from './harness.js';

const SEEDS = [1, 2, 3, 4, 5, 6];

test('a host caught sending corrupt bytes takes no first copies and at most two downloads; the origin re-sends only what it got before, and every host completes', () => {
  const pieces = 48;
  const bad = 3;
  const hosts = range(0, 8);
  for (const seed of SEEDS) {
    const driver = new Driver(makeConfig({ pieceCount: pieces, randomSeed: seed, ringParents: 4 }), seed);
    for (const host of hosts) driver.add(hostSpec(host));
    let blamedAt = -1;
    let onlyBadHeld: number[] = [];
    const resent = new Set<number>();
    let originToBadBefore = 0;
    const onAssigned = (assigned: readonly Assignment[]): void => {
      for (const a of assigned) {
        if (blamedAt < 0) {
          if (a.from === ORIGIN && a.host === bad) originToBadBefore++;
          continue;
        }
        if (a.from === ORIGIN && a.host !== bad) resent.add(a.piece);
        if (a.host !== bad) continue;
        const others = hosts.some((h) => h !== bad && !driver.core.isComplete(h));
        assert.ok(!(a.from === ORIGIN && others), `seed ${seed}: a first copy went to the blamed host`);
        const inFlight = driver.inFlight.filter((t) => t.host === bad).length;
        assert.ok(inFlight <= 2, `seed ${seed}: the blamed host has ${inFlight} downloads`);
      }
    };
    onAssigned(driver.poll());
    for (let steps = 0; steps < 100_000; steps++) {
      if (hosts.every((h) => driver.core.isComplete(h))) break;
      if (driver.inFlight.length === 0) {
        const next = driver.core.pollTimeout();
        assert.ok(next !== undefined, `seed ${seed}: stalled`);
        driver.nowMs = Math.max(driver.nowMs, next);
        driver.core.handleTimeout(driver.nowMs);
        onAssigned(driver.poll());
        continue;
      }
      const done = driver.inFlight[driver.random.below(driver.inFlight.length)]!;
      driver.report(done.transferId, done.from === bad ? 'corrupt' : 'verified');
      if (blamedAt < 0 && driver.core.isDemoted(bad)) {
        blamedAt = steps;
        onlyBadHeld = range(0, pieces).filter(
          (p) => driver.core.hasPiece(bad, p) && hosts.every((h) => h === bad || !driver.core.hasPiece(h, p)),
        );
      }
      driver.core.checkInvariants();
      onAssigned(driver.poll());
    }
    assert.ok(
      hosts.every((h) => driver.core.isComplete(h)),
      `seed ${seed}: every host, the blamed one too, completes`,
    );
    assert.ok(blamedAt >= 0, `seed ${seed}: two hosts' reports blamed host ${bad}`);
    for (const piece of onlyBadHeld)
      assert.ok(
        resent.has(piece),
        `seed ${seed}: piece ${piece}, held only by the blamed host, came from the origin`,
      );
    // The origin sent each piece once, but for what the blamed host got from it before its
    // blame (pieces only it held go again).
    const originTotal = driver.log.filter((a) => a.from === ORIGIN).length;
    assert.ok(
      originTotal <= pieces + originToBadBefore,
      `seed ${seed}: ${originTotal} origin transfers for ${pieces} pieces (${originToBadBefore} to host ${bad} before)`,
    );
  }
});

test('a parent blamed by made-up reports that a re-check clears is planned and serves as before', () => {
  const pieces = 16;
  for (const seed of SEEDS) {
    const driver = new Driver(
      makeConfig({ pieceCount: pieces, randomSeed: seed, ringParents: 0, downloadsPerHostMax: 1 }),
      seed,
    );
    driver.add(hostSpec(1, { seed: true }));
    // Two hosts lacking piece 5 fetch it from host 1 and call it corrupt (made up).
    driver.add(
      hostSpec(7),
      range(0, pieces).filter((p) => p !== 5),
    );
    driver.add(
      hostSpec(8),
      range(0, pieces).filter((p) => p !== 5),
    );
    for (const lie of driver.poll().filter((a) => a.from === 1)) driver.report(lie.transferId, 'corrupt');
    driver.core.checkInvariants();
    assert.equal(driver.core.isDemoted(1), true, `seed ${seed}: two accusers blame host 1`);
    // A host that needs piece 5 re-checks it from host 1; its verified copy clears host 1.
    driver.add(
      hostSpec(9),
      range(0, pieces).filter((p) => p !== 5),
    );
    const probe = driver.poll().find((a) => a.host === 9 && a.piece === 5);
    assert.ok(probe !== undefined && probe.from === 1, `seed ${seed}: host 9 re-checks piece 5 from host 1`);
    driver.report(probe.transferId, 'verified');
    driver.core.checkInvariants();
    assert.equal(driver.core.isDemoted(1), false, `seed ${seed}: the re-check cleared host 1`);
    // Host 1 counts and serves again: a newcomer lacking everything fetches from it.
    driver.add(hostSpec(10));
    const fromOne = driver.poll().filter((a) => a.host === 10 && a.from === 1);
    assert.ok(fromOne.length > 0, `seed ${seed}: host 10 fetches from the cleared host 1`);
    driver.core.checkInvariants();
  }
});
