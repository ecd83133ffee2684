import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  FAILURE_SCORE_DEMOTED,
  localityTier,
  median,
  ParentRecords,
  parentScore,
  RATE_RING_MIN,
  SLOW_SAMPLES_MIN,
  TIER_OTHER,
  TIER_RACK,
  TIER_ZONE,
} from '../../src/swarm/core/parent-score.js';

test('locality: same rack, then same zone, then anything; unknown labels match nothing', () => {
  assert.equal(localityTier(0, 5, 0, 5), TIER_RACK);
  assert.equal(localityTier(0, 5, 0, 6), TIER_ZONE);
  assert.equal(localityTier(0, 5, 1, 7), TIER_OTHER);
  assert.equal(localityTier(-1, -1, -1, -1), TIER_OTHER);
  assert.equal(localityTier(0, -1, 0, -1), TIER_ZONE);
});

test('score order: healthy before demoted, then tier, then idle bandwidth', () => {
  const healthyFarIdle = parentScore(false, TIER_OTHER, 1e9);
  const healthyRackBusy = parentScore(false, TIER_RACK, 1);
  const healthyZone = parentScore(false, TIER_ZONE, 5e8);
  const demotedRackIdle = parentScore(true, TIER_RACK, 1e10);
  assert.ok(healthyRackBusy > healthyZone && healthyZone > healthyFarIdle);
  assert.ok(healthyFarIdle > demotedRackIdle, 'a demoted parent ranks below every healthy one');
  assert.ok(parentScore(false, TIER_ZONE, 2e8) > parentScore(false, TIER_ZONE, 1e8));
  assert.equal(
    parentScore(false, TIER_ZONE, -5),
    parentScore(false, TIER_ZONE, 0),
    'negative idle counts as none',
  );
  assert.ok(
    parentScore(false, TIER_OTHER, 1e20) < parentScore(false, TIER_ZONE, 0),
    'idle never spills over tiers',
  );
});

test('median of the first values', () => {
  assert.equal(median(Float64Array.from([5, 1, 3]), 3), 3);
  assert.equal(median(Float64Array.from([4, 1, 3, 2]), 4), 2.5);
  assert.equal(median(Float64Array.from([9, 1, 100]), 2), 5);
});

test('idle bandwidth uses the measured per-upload rate once known', () => {
  const records = new ParentRecords();
  records.ensureHosts(2);
  records.reset(0, 100);
  assert.equal(records.idleBytesPerSecond(0, 1, 4), 75, 'unmeasured: capacity split over the slots');
  records.recordVerified(0, 10);
  assert.equal(records.idleBytesPerSecond(0, 2, 4), 80);
  records.recordVerified(1, undefined);
  assert.equal(records.rateSamples[1], 0, 'a report without a rate is not a sample');
});

test('a parent far slower than the median is demoted after enough samples', () => {
  const records = new ParentRecords();
  records.ensureHosts(10);
  for (let host = 0; host < 10; host++) records.reset(host, 1000);
  for (let i = 0; i < RATE_RING_MIN; i++) records.recordVerified(1 + (i % 8), 100);
  for (let i = 0; i < SLOW_SAMPLES_MIN - 1; i++) records.recordVerified(0, 10);
  assert.equal(records.isDemoted(0), false, 'not judged before SLOW_SAMPLES_MIN samples');
  records.recordVerified(0, 10);
  assert.equal(records.isDemoted(0), true);
  assert.equal(records.isDemoted(1), false);
  for (let i = 0; i < 20; i++) records.recordVerified(0, 100);
  assert.equal(records.isDemoted(0), false, 'a parent that speeds up is trusted again');
});

test('failures demote; verified uploads heal', () => {
  const records = new ParentRecords();
  records.ensureHosts(1);
  records.reset(0, 1000);
  for (let i = 0; i < FAILURE_SCORE_DEMOTED; i++) records.recordFailed(0);
  assert.equal(records.isDemoted(0), true);
  records.recordVerified(0, undefined);
  assert.equal(records.isDemoted(0), false);
});

test('corrupt: one accuser alone changes nothing for everyone; two demote; a confirmed re-check bans', () => {
  const records = new ParentRecords();
  records.ensureHosts(5);
  assert.equal(records.recordCorrupt(0, 1), 'accused');
  assert.equal(records.isDemoted(0), false, 'one report is no evidence');
  assert.equal(records.recordCorrupt(0, 1), 'accused', 'the same reporter twice is one accuser');
  assert.equal(records.recordCorrupt(0, 2), 'demoted', 'accusers alone never ban');
  assert.equal(records.banned[0], 0);
  assert.equal(records.confirm(0, 3), 'banned', 'a re-check by a third host got corrupt bytes too');
  assert.equal(records.banned[0], 1);
  records.reset(0, 1000);
  assert.equal(records.banned[0], 1, 'rejoining does not lift a ban');
});

test('corrupt: accusers against a parent that served others are outweighed, and then distrusted', () => {
  const records = new ParentRecords();
  records.ensureHosts(10);
  // Host 0 served hosts 3..6 verified bytes: four witnesses.
  for (const receiver of [3, 4, 5, 6]) records.recordVerified(0, 1e6, receiver);
  // Two made-up hosts accuse it.
  assert.equal(records.recordCorrupt(0, 8), 'accused');
  assert.equal(records.recordCorrupt(0, 9), 'accused');
  assert.equal(records.banned[0], 0);
  assert.equal(records.isDemoted(0), false);
  assert.deepEqual([records.distrusted[8], records.distrusted[9]], [1, 1], 'the accusers did not hold up');
  assert.ok(records.isDemoted(8) && records.isDemoted(9), 'a distrusted host ranks as a demoted parent');
  // Their later reports count for nothing.
  assert.equal(records.recordCorrupt(1, 8), 'ignored');
  assert.equal(records.recordCorrupt(1, 9), 'ignored');
  assert.equal(records.banned[1], 0);
});

test('corrupt: as many accusers as witnesses demote, more ban; witnesses arriving later clear a demotion', () => {
  const records = new ParentRecords();
  records.ensureHosts(10);
  records.recordVerified(0, 1e6, 5);
  records.recordVerified(0, 1e6, 6);
  records.recordCorrupt(0, 1);
  assert.equal(records.recordCorrupt(0, 2), 'demoted', 'two accusers, two witnesses');
  assert.ok(records.isDemoted(0));
  for (const receiver of [7, 8]) records.recordVerified(0, 1e6, receiver);
  assert.equal(records.isDemoted(0), false, 'four witnesses against two accusers clear it');
  assert.equal(records.recordCorrupt(3, 1), 'ignored', 'its accusers are distrusted');
  const fresh = new ParentRecords();
  fresh.ensureHosts(10);
  fresh.recordVerified(0, 1e6, 5);
  fresh.recordCorrupt(0, 1);
  fresh.recordCorrupt(0, 2);
  assert.equal(fresh.recordCorrupt(0, 3), 'demoted', 'three accusers against one witness, unconfirmed');
  assert.equal(fresh.confirm(0, 4), 'banned', 'confirmed');
  const vouched = new ParentRecords();
  vouched.ensureHosts(10);
  for (const receiver of [5, 6, 7]) vouched.recordVerified(0, 1e6, receiver);
  vouched.recordCorrupt(0, 1);
  assert.equal(vouched.confirm(0, 2), 'accused', 'a confirmed pair against three witnesses bans nothing');
});
