import { test } from 'node:test';
import assert from 'node:assert/strict';
import { HolderBits } from '../../src/swarm/core/holders.js';
import { ParentRecords } from '../../src/swarm/core/parent-score.js';
import {
  BANS_PER_HOST_MAX,
  PARENT_CANDIDATES_MAX,
  ParentSearch,
} from '../../src/swarm/core/parent-search.js';
import { Random } from '../../src/swarm/core/random.js';
import { TransferTable } from '../../src/swarm/core/transfers.js';

const HOSTS = 100;

/** Hosts 0..99, every one holding piece 0 with a free upload slot; labels: zone = id % 2, rack = id % 10. */
function setup(seed: number): { search: ParentSearch; transfers: TransferTable; parents: ParentRecords } {
  const holders = new HolderBits(4);
  holders.ensureHosts(HOSTS);
  const transfers = new TransferTable(64);
  transfers.ensureHosts(HOSTS);
  const parents = new ParentRecords();
  parents.ensureHosts(HOSTS);
  const search = new ParentSearch(holders, transfers, parents, new Random(seed), 2);
  search.ensureHosts(HOSTS);
  for (let host = 0; host < HOSTS; host++) {
    parents.reset(host, 1e8);
    search.join(host, host % 2, host % 10);
    holders.set(0, host);
    search.setFree(host, true);
  }
  return { search, transfers, parents };
}

test('the search prefers the rack, then the zone; only free, unbanned holders qualify', () => {
  for (const seed of [1, 2, 3]) {
    const { search } = setup(seed);
    for (let i = 0; i < 20; i++) {
      const parent = search.findParent(13, 0, -1);
      assert.equal(parent % 10, 3, `seed ${seed}: host 13 got parent ${parent}, not a rack mate`);
      assert.notEqual(parent, 13);
    }
    for (let host = 3; host < HOSTS; host += 10) search.setFree(host, false);
    for (let i = 0; i < 20; i++) {
      const parent = search.findParent(13, 0, -1);
      assert.equal(parent % 2, 1, `seed ${seed}: host 13 got parent ${parent}, not a zone mate`);
    }
    for (let host = 1; host < HOSTS; host += 2) search.setFree(host, false);
    assert.equal(search.findParent(13, 0, -1) % 2, 0, 'then anyone');
    assert.equal(search.findParent(13, 1, -1), -1, 'nobody holds piece 1');
    assert.equal(search.freeUploaders, 50);
  }
});

test('ties are broken at random, the excluded parent and banned parents are never chosen', () => {
  const seed = 4;
  const { search } = setup(seed);
  const chosen = new Set<number>();
  for (let i = 0; i < 200; i++) chosen.add(search.findParent(13, 0, 23));
  assert.ok(!chosen.has(23) && !chosen.has(13), `seed ${seed}`);
  assert.ok(chosen.size >= 5, `seed ${seed}: only ${[...chosen].join(',')}`);
  for (const parent of chosen) search.ban(13, parent);
  for (const parent of [3, 33, 43, 53, 63, 73, 83, 93]) search.ban(13, parent);
  assert.ok(search.hasBans(13));
  const next = search.findParent(13, 0, 23);
  assert.ok(next !== -1 && !chosen.has(next) && next % 10 !== 3, `seed ${seed}: got ${next}`);
  assert.equal(search.score(13, 33, -1), -1);
});

test('a parent with its upload slots full is not eligible; scores fall with load', () => {
  const { search, transfers } = setup(5);
  const idle = search.score(13, 3, -1);
  transfers.start(50, 0, 3, false);
  assert.ok(search.score(13, 3, -1) < idle);
  transfers.start(51, 0, 3, false);
  assert.equal(search.score(13, 3, -1), -1, 'both of its 2 upload slots are busy');
  assert.ok(search.score(13, 13, -1) === -1, 'a host is not its own parent');
});

test('scoring stops after PARENT_CANDIDATES_MAX candidates per tier but keeps the best tier', () => {
  assert.ok(PARENT_CANDIDATES_MAX >= 4);
  const { search, parents } = setup(6);
  // Every rack mate of 13 is demoted: a healthy zone mate must win over them.
  for (let host = 3; host < HOSTS; host += 10) {
    parents.recordFailed(host);
    parents.recordFailed(host);
  }
  const parent = search.findParent(13, 0, -1);
  assert.ok(parent % 2 === 1 && parent % 10 !== 3, `got ${parent}`);
});

test('bans are bounded per host and reported; leaving clears them', () => {
  const { search } = setup(7);
  for (let parent = 0; parent < BANS_PER_HOST_MAX + 5; parent++) search.ban(99, parent);
  assert.equal(search.bannedBy(99).length, BANS_PER_HOST_MAX);
  assert.ok(search.isBannedFor(99, BANS_PER_HOST_MAX + 4), 'the newest ban is kept');
  assert.ok(!search.isBannedFor(99, 0), 'the oldest ban is forgotten');
  assert.ok(search.allHoldersBanned(99, 1), 'vacuously: nobody holds piece 1');
  assert.equal(search.allHoldersBanned(99, 0), false);
  search.leave(99);
  assert.deepEqual(search.bannedBy(99), []);
});
