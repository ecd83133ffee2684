/**
 * Re-checks of suspected pieces (issue 16, "blame needs evidence"): a corrupt report makes the core
 * have a third host fetch the same piece from the same parent. A verified copy refutes the report
 * (the accuser is distrusted and demoted); a corrupt one from a host others vouch for confirms it.
 */

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Rechecks, RECHECK_ATTEMPTS_MAX, RECHECKS_PENDING_MAX } from '../../src/swarm/core/recheck.js';
import { IGNORED_REPORTS_EJECT } from '../../src/swarm/core/swarm-core.js';
import { ORIGIN, type Assignment } from '../../src/swarm/core/types.js';
import { Driver, hostSpec, makeConfig, range } from './harness.js';

const PIECES = 16;
const SEEDS = [1, 2, 3, 4, 5];

function swarm(seed: number, downloadsPerHostMax = 1): Driver {
  return new Driver(
    makeConfig({ pieceCount: PIECES, randomSeed: seed, ringParents: 0, downloadsPerHostMax }),
    seed,
  );
}

/** Host 1 holds the model; host 8 lacks piece 5 only and fetches it from 1; nobody else is there. */
function accusedSwarm(seed: number): { driver: Driver; accused: Assignment } {
  const driver = swarm(seed);
  driver.add(hostSpec(1, { seed: true }));
  driver.add(
    hostSpec(8),
    range(0, PIECES).filter((p) => p !== 5),
  );
  const [accused] = driver.poll();
  assert.deepEqual([accused!.host, accused!.piece, accused!.from], [8, 5, 1], `seed ${seed}`);
  return { driver, accused: accused! };
}

test('a false corrupt report is re-checked by a third host; its verified copy distrusts the accuser', () => {
  for (const seed of SEEDS) {
    const { driver, accused } = accusedSwarm(seed);
    driver.report(accused.transferId, 'corrupt');
    assert.equal(driver.core.stats.rechecksStarted, 0, `seed ${seed}: no third host yet`);
    // A host that needs the piece joins: its first fetch is the re-check, from the accused parent.
    driver.add(hostSpec(9));
    const probes = driver.poll().filter((a) => a.host === 9 && a.piece === 5);
    assert.equal(probes.length, 1, `seed ${seed}: host 9 re-checks piece 5`);
    assert.equal(probes[0]!.from, 1, `seed ${seed}: from the accused parent`);
    assert.equal(driver.core.stats.rechecksStarted, 1);
    driver.report(probes[0]!.transferId, 'verified');
    assert.equal(driver.core.stats.rechecksRefuted, 1, `seed ${seed}`);
    assert.equal(driver.core.isDemoted(8), true, `seed ${seed}: the accuser whose report failed is demoted`);
    assert.equal(driver.core.isDemoted(1), false, `seed ${seed}: the parent is cleared`);
    assert.equal(driver.core.isBanned(1), false);
    // The accuser's later reports are ignored: another made-up one against host 9 starts no re-check.
    assert.ok(driver.runUntilComplete([8, 9]) >= 0, `seed ${seed}: stalled`);
  }
});

test('a distrusted accuser cannot demote an honest parent with a second voice', () => {
  for (const seed of SEEDS) {
    const { driver, accused } = accusedSwarm(seed);
    driver.report(accused.transferId, 'corrupt');
    driver.add(hostSpec(9));
    const probe = driver.poll().find((a) => a.host === 9 && a.piece === 5)!;
    driver.report(probe.transferId, 'verified');
    // A second liar accuses host 1: with host 8 discredited it is one accuser against a witness.
    driver.add(
      hostSpec(7),
      range(0, PIECES).filter((p) => p !== 6),
    );
    const lie = driver.poll().find((a) => a.host === 7 && a.from === 1);
    assert.ok(lie !== undefined, `seed ${seed}: host 7 fetches from host 1`);
    driver.report(lie.transferId, 'corrupt');
    assert.equal(driver.core.isDemoted(1), false, `seed ${seed}`);
    assert.equal(driver.core.isBanned(1), false, `seed ${seed}`);
  }
});

test('a probe from a host no one vouches for confirms nothing: it only accuses, and another host re-checks', () => {
  for (const seed of SEEDS) {
    const { driver, accused } = accusedSwarm(seed);
    driver.report(accused.transferId, 'corrupt');
    driver.add(hostSpec(9));
    const probe = driver.poll().find((a) => a.host === 9 && a.piece === 5)!;
    assert.equal(probe.from, 1);
    // Host 9 has sent nothing to anyone: it might be host 8's accomplice.
    driver.report(probe.transferId, 'corrupt');
    assert.equal(driver.core.stats.rechecksConfirmed, 0, `seed ${seed}`);
    assert.equal(driver.core.isBanned(1), false, `seed ${seed}: accusations alone never ban`);
    assert.equal(driver.core.isDemoted(1), true, `seed ${seed}: two accusers, no witness`);
    driver.add(hostSpec(10));
    const again = driver.poll().find((a) => a.host === 10 && a.piece === 5);
    assert.equal(again?.from, 1, `seed ${seed}: host 10 re-checks it`);
    assert.equal(driver.core.stats.rechecksStarted, 2);
  }
});

/**
 * Runs the swarm until `honest` hosts complete: `liars` report every transfer from a peer as
 * corrupt, and every transfer from a `corrupt` parent is corrupt; the rest verify.
 */
function runWithFaults(
  driver: Driver,
  honest: readonly number[],
  liars: readonly number[],
  corrupt: readonly number[],
): void {
  driver.poll();
  for (let steps = 0; steps < 20_000 && !honest.every((h) => driver.core.isComplete(h)); steps++) {
    if (driver.inFlight.length === 0) break;
    const done = driver.inFlight[driver.random.below(driver.inFlight.length)]!;
    const bad = corrupt.includes(done.from) || (liars.includes(done.host) && done.from !== ORIGIN);
    driver.report(done.transferId, bad ? 'corrupt' : 'verified');
    driver.poll();
    driver.core.checkInvariants();
  }
}

test('a parent that sends corrupt bytes is confirmed by a re-check from a vouched host and banned for everyone', () => {
  for (const seed of SEEDS) {
    const driver = swarm(seed, 2);
    driver.add(hostSpec(1, { seed: true }));
    driver.add(hostSpec(7, { seed: true }));
    const honest = [2, 3, 4, 5, 6];
    for (const host of honest) driver.add(hostSpec(host));
    runWithFaults(driver, honest, [], [7]);
    assert.ok(
      honest.every((h) => driver.core.isComplete(h)),
      `seed ${seed}: honest hosts complete`,
    );
    assert.equal(driver.core.isBanned(7), true, `seed ${seed}: the corrupt parent is banned`);
    assert.ok(driver.core.stats.rechecksConfirmed >= 1, `seed ${seed}`);
    for (const host of [1, ...honest]) {
      assert.equal(driver.core.isDemoted(host), false, `seed ${seed}: honest host ${host} demoted`);
    }
  }
});

test('a probe that fails is tried again, a bounded number of times', () => {
  const seed = 3;
  const { driver, accused } = accusedSwarm(seed);
  driver.report(accused.transferId, 'corrupt');
  driver.add(hostSpec(9));
  for (let attempt = 1; attempt <= RECHECK_ATTEMPTS_MAX; attempt++) {
    const probe = driver.poll().find((a) => a.host === 9 && a.piece === 5 && a.from === 1);
    assert.ok(probe !== undefined, `attempt ${attempt}: a probe`);
    assert.equal(driver.core.stats.rechecksStarted, attempt);
    // Host 9's other transfers finish so that only the probe is left to fail.
    for (const other of driver.inFlight.filter((a) => a !== probe))
      driver.report(other.transferId, 'verified');
    driver.report(probe.transferId, 'failed');
  }
  driver.poll();
  assert.equal(driver.core.stats.rechecksStarted, RECHECK_ATTEMPTS_MAX, 'no probe after the last attempt');
  assert.equal(driver.core.stats.rechecksRefuted + driver.core.stats.rechecksConfirmed, 0);
});

test('a prober that leaves mid-probe hands the re-check to another host', () => {
  const seed = 4;
  const { driver, accused } = accusedSwarm(seed);
  driver.report(accused.transferId, 'corrupt');
  driver.add(hostSpec(9));
  const probe = driver.poll().find((a) => a.host === 9 && a.piece === 5)!;
  driver.removeHost(9);
  driver.add(hostSpec(10));
  const second = driver.poll().find((a) => a.host === 10 && a.piece === 5);
  assert.ok(second !== undefined && second.from === 1, 'host 10 re-checks piece 5 from host 1');
  assert.notEqual(second.transferId, probe.transferId);
  driver.report(second.transferId, 'verified');
  assert.equal(driver.core.stats.rechecksRefuted, 1);
  driver.core.checkInvariants();
});

test('made-up reports from many fake hosts: each liar is found out, no honest host is demoted', () => {
  for (const seed of SEEDS) {
    const driver = swarm(seed, 2);
    driver.add(hostSpec(1, { seed: true }));
    for (const honest of [2, 3, 4, 5, 6]) driver.add(hostSpec(honest));
    const liars = [20, 21, 22];
    for (const liar of liars) driver.add(hostSpec(liar));
    const honest = [2, 3, 4, 5, 6];
    runWithFaults(driver, honest, liars, []);
    assert.ok(
      honest.every((h) => driver.core.isComplete(h)),
      `seed ${seed}: honest hosts complete`,
    );
    for (const host of [1, ...honest]) {
      assert.equal(driver.core.isBanned(host), false, `seed ${seed}: honest host ${host} banned`);
      assert.equal(driver.core.isDemoted(host), false, `seed ${seed}: honest host ${host} demoted`);
    }
    const caught = liars.filter((liar) => driver.core.isDemoted(liar));
    assert.deepEqual(caught, liars, `seed ${seed}: every liar is distrusted`);
    assert.ok(driver.core.stats.rechecksRefuted >= 1, `seed ${seed}: caught by re-checks`);
  }
});

test('a distrusted host that goes on reporting corrupt pieces is planned for no more (no endless feeding)', () => {
  for (const seed of SEEDS) {
    const big = new Driver(
      makeConfig({ pieceCount: 64, randomSeed: seed, ringParents: 0, downloadsPerHostMax: 2 }),
      seed,
    );
    big.add(hostSpec(1, { seed: true }));
    const honest = [2, 3, 4, 5, 6];
    for (const host of honest) big.add(hostSpec(host));
    big.add(hostSpec(9));
    big.poll();
    let lies = 0;
    for (let steps = 0; steps < 50_000 && big.inFlight.length > 0; steps++) {
      const done = big.inFlight[big.random.below(big.inFlight.length)]!;
      const lie = done.host === 9 && done.from !== ORIGIN;
      if (lie) lies++;
      big.report(done.transferId, lie ? 'corrupt' : 'verified');
      big.poll();
    }
    assert.ok(
      honest.every((h) => big.core.isComplete(h)),
      `seed ${seed}: honest hosts complete`,
    );
    // Its first reports, then at most IGNORED_REPORTS_EJECT once distrusted (plus what was in flight).
    assert.ok(lies <= IGNORED_REPORTS_EJECT + 4, `seed ${seed}: ${lies} corrupt reports from host 9`);
    assert.ok(
      big.core.isComplete(9) || big.core.isEjected(9),
      `seed ${seed}: the liar either finished from the origin or was ejected`,
    );
    assert.equal(big.core.isEjected(2), false);
  }
});

test('the re-check queue is bounded and keeps one entry per parent and accuser', () => {
  const rechecks = new Rechecks();
  assert.equal(rechecks.add(1, 5, 8), true);
  assert.equal(rechecks.add(1, 6, 8), false, 'the same pair again');
  assert.equal(rechecks.add(1, 5, 9), true, 'another accuser');
  for (let accuser = 100; rechecks.pending < RECHECKS_PENDING_MAX; accuser++) rechecks.add(2, 0, accuser);
  assert.equal(rechecks.add(3, 0, 7), false, 'full');
  rechecks.startAt(0, 42);
  assert.equal(rechecks.probing, 1);
  assert.equal(rechecks.add(1, 5, 8), false, 'the pair is being probed (and the queue is full)');
  const taken = rechecks.take(42)!;
  assert.equal(rechecks.take(42), undefined, 'taken once');
  rechecks.retry(taken);
  assert.equal(rechecks.pending, RECHECKS_PENDING_MAX);
  taken.attempts = RECHECK_ATTEMPTS_MAX;
  rechecks.removeAt(0);
  rechecks.retry(taken);
  assert.equal(rechecks.pending, RECHECKS_PENDING_MAX - 1, 'no retry after the last attempt');
});
