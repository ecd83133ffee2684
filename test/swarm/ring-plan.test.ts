/** The ring plan (src/swarm/core/ring-plan.ts): rings by id, bridging, stalls and cuts. */

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { NO_PARENT, NO_RING, RingPlan } from '../../src/swarm/core/ring-plan.js';

function parents(plan: RingPlan, hosts: number[]): number[] {
  return hosts.map((host) => plan.parentOf(host));
}

test('members joining in any order form one ring in id order; each change is announced once', () => {
  const plan = new RingPlan({ stallMs: 1000 });
  assert.equal(plan.join(0, 5), 0);
  assert.deepEqual(
    plan.pollChanges(),
    [{ host: 5, parent: NO_PARENT, ring: 0 }],
    'a lone member has no parent',
  );
  for (const host of [2, 9, 0]) plan.join(0, host);
  assert.deepEqual(parents(plan, [0, 2, 5, 9]), [9, 0, 2, 5]);
  const changes = plan.pollChanges();
  assert.deepEqual(
    [...changes].sort((a, b) => a.host - b.host),
    [
      { host: 0, parent: 9, ring: 0 },
      { host: 2, parent: 0, ring: 0 },
      { host: 5, parent: 2, ring: 0 },
      { host: 9, parent: 5, ring: 0 },
    ],
  );
  assert.deepEqual(plan.pollChanges(), [], 'nothing changed since');
  assert.equal(plan.join(0, 2), 0, 'joining twice changes nothing');
  assert.deepEqual(plan.pollChanges(), []);
});

test('a member that leaves is bridged; one that comes back is announced afresh', () => {
  const plan = new RingPlan({ stallMs: 1000 });
  for (const host of [0, 1, 2, 3]) plan.join(0, host);
  plan.pollChanges();
  plan.leave(10, 2);
  assert.equal(plan.has(2), false);
  assert.equal(plan.ringOf(2), NO_RING);
  assert.deepEqual(plan.pollChanges(), [{ host: 3, parent: 1, ring: 0 }]);
  plan.join(20, 2);
  assert.deepEqual(
    plan.pollChanges().sort((a, b) => a.host - b.host),
    [
      { host: 2, parent: 1, ring: 0 },
      { host: 3, parent: 2, ring: 0 },
    ],
  );
  plan.leave(30, 0);
  plan.leave(30, 1);
  plan.leave(30, 2);
  assert.deepEqual(plan.pollChanges(), [{ host: 3, parent: NO_PARENT, ring: 0 }], 'alone again');
});

test('a full ring makes another: the seventeenth host starts ring 1', () => {
  const plan = new RingPlan({ stallMs: 1000 });
  for (let host = 0; host < 17; host++) plan.join(0, host);
  assert.equal(plan.ringOf(15), 0);
  assert.equal(plan.ringOf(16), 1);
  assert.equal(plan.parentOf(0), 15, 'ring 0 closes at its own last member');
  assert.equal(plan.parentOf(16), NO_PARENT);
  plan.join(0, 17);
  assert.deepEqual(parents(plan, [16, 17]), [17, 16]);
  plan.leave(0, 3);
  assert.equal(plan.join(0, 40), 0, 'a place freed in ring 0 is taken first');
  assert.equal(plan.parentOf(0), 40);
  assert.throws(() => new RingPlan({ stallMs: 1000, membersMax: 1 }), /membersMax/);
});

test('a link is cut when its parent has more and nothing came through it for the stall time', () => {
  const stallMs = 1000;
  const plan = new RingPlan({ stallMs });
  for (const host of [0, 1, 2]) plan.join(0, host);
  plan.pollChanges();
  // Host 1's parent (0) holds a piece it lacks; the others' parents have nothing for them.
  const missing = (parent: number, child: number): boolean => parent === 0 && child === 1;
  assert.equal(plan.nextCheckMs(), stallMs / 2);
  assert.deepEqual(plan.check(400, missing), [], 'too early to look');
  assert.deepEqual(plan.check(600, missing), [], 'waiting starts at the first look');
  plan.delivered(900, 1);
  assert.deepEqual(plan.check(1500, missing), [], 'a delivery restarts the clock');
  assert.deepEqual(plan.check(2000, missing), [], 'waiting since 1500');
  assert.deepEqual(plan.check(2500, missing), [1], 'quiet since 900, waiting since 1500');
  assert.equal(plan.parentOf(1), NO_PARENT);
  assert.equal(plan.isCut(1), true);
  assert.deepEqual(plan.pollChanges(), [{ host: 1, parent: NO_PARENT, ring: 0 }]);
  // A parent with nothing to give never stalls a link, however long it is quiet.
  assert.deepEqual(plan.check(100_000, missing), []);
  assert.equal(plan.parentOf(2), 1, 'the cut host still feeds its own child');
  // A cut host stays cut when the ring changes around it.
  plan.leave(100_000, 0);
  assert.equal(plan.parentOf(1), NO_PARENT);
  assert.equal(plan.parentOf(2), 1);
});

test('nextCheckMs names when a look is due; no fed member, no check', () => {
  const plan = new RingPlan({ stallMs: 1000 });
  assert.equal(plan.nextCheckMs(), undefined);
  plan.join(0, 0);
  assert.equal(plan.nextCheckMs(), undefined, 'alone: nobody feeds it');
  plan.join(100, 1);
  assert.equal(plan.nextCheckMs(), 600, 'links made at 100; half the stall time later');
  plan.check(600, () => false);
  assert.equal(plan.nextCheckMs(), 850, 'nothing to give: look again a quarter of the stall time on');
  plan.check(850, () => true);
  assert.equal(plan.nextCheckMs(), 1850, 'waiting since 850: cut at 850 + the stall time');
});

test('chains: members in the order they joined, the head with no parent; a member coming back joins at the tail', () => {
  const plan = new RingPlan({ stallMs: 1000, chain: true });
  for (const host of [5, 3, 9]) plan.join(0, host);
  assert.deepEqual(
    parents(plan, [5, 3, 9]),
    [NO_PARENT, 5, 3],
    'joined 5, 3, 9: the last member feeds nobody',
  );
  plan.pollChanges();
  // A lower id joining later (a restarted agent keeps its id) takes the tail, not the head: behind
  // the others, as a head it would hold the whole chain back.
  plan.join(10, 1);
  assert.deepEqual(parents(plan, [5, 3, 9, 1]), [NO_PARENT, 5, 3, 9]);
  assert.deepEqual(plan.pollChanges(), [{ host: 1, parent: 9, ring: 0 }], 'only the newcomer is linked');
  plan.leave(20, 5);
  assert.deepEqual(parents(plan, [3, 9, 1]), [NO_PARENT, 3, 9], 'the head left: its child heads the chain');
  plan.leave(30, 9);
  assert.deepEqual(parents(plan, [3, 1]), [NO_PARENT, 3], 'a member in the middle left: bridged');
  plan.join(40, 5);
  assert.deepEqual(parents(plan, [3, 1, 5]), [NO_PARENT, 3, 1], 'the old head comes back at the tail');
  assert.deepEqual(plan.summary(), { members: 3, fed: 2, cut: 0 });
});

test('chains take every member: no second chain at 17 or 1000 members', () => {
  const plan = new RingPlan({ stallMs: 1000, chain: true });
  for (let host = 0; host < 1000; host++) plan.join(0, host);
  const heads = Array.from({ length: 1000 }, (_, host) => host).filter(
    (host) => plan.parentOf(host) === NO_PARENT,
  );
  assert.deepEqual(heads, [0]);
  assert.equal(plan.ringOf(999), plan.ringOf(0));
  const rings = new RingPlan({ stallMs: 1000 });
  for (let host = 0; host < 17; host++) rings.join(0, host);
  assert.notEqual(rings.ringOf(16), rings.ringOf(0), 'rings still take 16');
});
