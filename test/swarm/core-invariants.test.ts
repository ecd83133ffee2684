/**
 * The core's derived state (free-uploader bits, holder rows, copy counts, slot counts, pieces in
 * flight) checked against its ground truth through whole runs with more pieces than any fixed
 * search limit (the walk's skip limit, the origin's scan limit, 4096), with failures, corrupt
 * parents, ending hints and hosts leaving and rejoining.
 */

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ORIGIN, type TransferOutcome } from '../../src/swarm/core/types.js';
import { Driver, hostSpec, makeConfig, range } from './harness.js';

const HOSTS = 12;
const PIECES = 5000;

function outcome(driver: Driver): TransferOutcome {
  const draw = driver.random.below(1000);
  return draw < 5 ? 'failed' : 'verified';
}

test('a 12-host, 5000-piece run keeps every derived structure true and completes', () => {
  for (const seed of [1, 2]) {
    const config = makeConfig({
      pieceCount: PIECES,
      randomSeed: seed,
      originReadersMax: 6,
      downloadsPerHostMax: 3,
      uploadsPerHostMax: 3,
      hedgeTailPieces: 3,
    });
    const driver = new Driver(config, seed);
    for (let host = 0; host < HOSTS; host++)
      driver.add(hostSpec(host, { zone: `z${host % 2}`, rack: `r${host % 4}` }));
    driver.poll();
    let steps = 0;
    let corruptSent = false;
    while (steps < 400_000 && driver.core.stats.hostsComplete < HOSTS) {
      steps++;
      if (driver.inFlight.length === 0) {
        if (driver.step() === undefined) break;
        continue;
      }
      const a = driver.inFlight[driver.random.below(driver.inFlight.length)]!;
      // Now and then a transfer is announced as ending first (the next request is pipelined).
      if (driver.random.below(4) === 0) {
        driver.core.handleTransferEnding(driver.nowMs, a.transferId);
        driver.poll();
        continue;
      }
      const corrupt: boolean = !corruptSent && a.from === 5 && steps > 2000;
      corruptSent ||= corrupt;
      driver.report(a.transferId, corrupt ? 'corrupt' : a.from === ORIGIN ? 'verified' : outcome(driver));
      driver.poll();
      if (steps === 20_000) {
        // A host leaves mid-run and comes back with what it had verified.
        const kept = range(0, PIECES).filter((piece) => driver.core.hasPiece(3, piece));
        driver.removeHost(3);
        driver.core.checkInvariants();
        driver.add(hostSpec(3, { zone: 'z1', rack: 'r3' }), kept);
        driver.poll();
      }
      if (steps % 5000 === 0) driver.core.checkInvariants();
    }
    driver.core.checkInvariants();
    assert.equal(driver.core.stats.hostsComplete, HOSTS, `seed ${seed}: stalled after ${steps} steps`);
    assert.ok(corruptSent, `seed ${seed}: host 5 never sent anything to corrupt`);
  }
});
