import { test } from 'node:test';
import assert from 'node:assert/strict';
import { fluidLowerBoundSeconds } from '../../src/sim/bound.js';
import { FluidNetwork, type Endpoint } from '../../src/sim/network.js';
import { Random } from '../../src/swarm/core/random.js';

const host = (up: number, down: number, rack = -1): Endpoint => ({
  uploadBytesPerMs: up,
  downloadBytesPerMs: down,
  rack,
});

function runUntilDone(network: FluidNetwork, tickMs: number, limitMs: number): Map<number, number> {
  const finished = new Map<number, number>();
  for (let now = 0; now < limitMs && network.flowCount > 0; now += tickMs) {
    for (const c of network.advance(now, now + tickMs)) {
      finished.set(c.transferId, c.atMs);
      network.remove(c.transferId);
    }
  }
  return finished;
}

test('a single flow runs at the slower of its two links and finishes at the exact time', () => {
  const network = new FluidNetwork([host(100, 100), host(100, 40)], 0, 0);
  network.add(1, 0, 1, 1000, 0);
  const done = runUntilDone(network, 7, 1000);
  assert.equal(done.get(1), 1000 / 40);
});

test('an upload link is water-filled: a flow capped downstream leaves its share to the others', () => {
  // Sender 0 (upload 90) feeds receiver 1 (download 10) and receiver 2 (download 1000).
  const network = new FluidNetwork([host(90, 0), host(0, 10), host(0, 1000)], 0, 0);
  network.add(1, 0, 1, 100, 0);
  network.add(2, 0, 2, 800, 0);
  const done = runUntilDone(network, 1, 100);
  assert.equal(done.get(1), 10); // 10 bytes/ms to the slow receiver
  assert.equal(done.get(2), 10); // the remaining 80 bytes/ms to the fast one
});

test('flows start after their start time and a download link is shared equally', () => {
  const network = new FluidNetwork([host(100, 0), host(100, 0), host(0, 50)], 0, 0);
  network.add(1, 0, 2, 250, 0);
  network.add(2, 1, 2, 250, 5);
  const done = runUntilDone(network, 1, 100);
  // 0..5 ms: flow 1 alone at 50 (250 bytes done at 5 ms exactly).
  assert.equal(done.get(1), 5);
  assert.equal(done.get(2), 10);
});

test('rack uplinks cap cross-rack flows only', () => {
  const endpoints = [host(100, 100, 0), host(100, 100, 0), host(100, 100, 1)];
  const network = new FluidNetwork(endpoints, 2, 20);
  network.add(1, 0, 1, 1000, 0); // same rack: what the uplink-capped flow leaves, 80/ms, then 100/ms
  network.add(2, 0, 2, 200, 0); // across racks: the uplink's 20/ms
  const done = runUntilDone(network, 1, 1000);
  assert.equal(done.get(2), 10);
  assert.equal(done.get(1), 12);
});

test('the fluid lower bound is the largest of its three terms', () => {
  const base = {
    totalBytes: 1000,
    hosts: 10,
    originUploadBytesPerSecond: 100,
    hostDownloadBytesPerSecond: 100,
    hostUploadBytesPerSecond: 50,
  };
  assert.equal(fluidLowerBoundSeconds(base), (10 * 1000) / (100 + 10 * 50)); // swarm upload
  assert.equal(fluidLowerBoundSeconds({ ...base, originUploadBytesPerSecond: 10 }), 100); // origin
  assert.equal(fluidLowerBoundSeconds({ ...base, hostDownloadBytesPerSecond: 5 }), 200); // download
});

test('transfer ids above 2^31 come back unchanged (the core numbers them up to 2^53)', () => {
  // The core's ids are generation * 2^21 + slot: a slot reused 1024 times already passes 2^31.
  const ids = [2 ** 31 + 5, 2 ** 32 + 7, 1024 * 2 ** 21 + 3, Number.MAX_SAFE_INTEGER];
  const network = new FluidNetwork([host(100, 0), host(0, 100)], 0, 0);
  ids.forEach((id, i) => network.add(id, 0, 1, 100 * (i + 1), 0));
  assert.deepEqual(network.flowsOf(1).sort(), [...ids].sort());
  const done = runUntilDone(network, 1, 1000);
  assert.deepEqual([...done.keys()].sort(), [...ids].sort());
  assert.equal(network.flowCount, 0);
});

test('a flow still waiting for its first byte does not hold back the flows that are moving', () => {
  // Receiver 2 (download 100) has a flow from 0 now and one from 1 whose first byte comes at 8 ms.
  // In the tick [0, 10) the late flow moves for 2 ms: the early one gets 100/1.2 per ms, not 50.
  const network = new FluidNetwork([host(1000, 0), host(1000, 0), host(0, 100)], 0, 0);
  network.add(1, 0, 2, 10_000, 0);
  network.add(2, 1, 2, 10_000, 8);
  network.advance(0, 10);
  const early = network.delivered(1)!;
  const late = network.delivered(2)!;
  assert.ok(Math.abs(early + late - 1000) < 1e-6, `the link moved ${early + late} of 1000 bytes`);
  assert.ok(Math.abs(early / 10 - late / 2) < 1e-9, 'both ran at the same rate while both moved');
});

test('a receiver whose flow is held back by its sender gives the spare to its other flows', () => {
  // Receiver 3 (download 100) takes from the busy sender 0 (upload 10) and the idle senders 1, 2.
  const network = new FluidNetwork([host(10, 0), host(1000, 0), host(1000, 0), host(0, 100)], 0, 0);
  network.add(1, 0, 3, 1e6, 0);
  network.add(2, 1, 3, 1e6, 0);
  network.add(3, 2, 3, 1e6, 0);
  network.advance(0, 1);
  assert.equal(network.delivered(1), 10);
  assert.ok(Math.abs(network.delivered(2)! - 45) < 1e-9, `${network.delivered(2)}: not 45`);
  assert.ok(Math.abs(network.delivered(3)! - 45) < 1e-9, `${network.delivered(3)}: not 45`);
});

test('no link carries more than its capacity, whatever the flows (seeded random swarms)', () => {
  for (const seed of [1, 2, 3, 4, 5]) {
    const random = new Random(seed);
    const count = 12;
    const endpoints: Endpoint[] = [];
    for (let e = 0; e < count; e++)
      endpoints.push(host(10 + random.below(100), 10 + random.below(100), random.below(3)));
    const uplink = 50 + random.below(100);
    const network = new FluidNetwork(endpoints, 3, uplink, 0.5);
    const flows: Array<{ id: number; src: number; dst: number }> = [];
    for (let id = 1; id <= 60; id++) {
      const src = random.below(count);
      const dst = (src + 1 + random.below(count - 1)) % count;
      network.add(id, src, dst, 100 + random.below(1000), random.nextFloat() * 30);
      flows.push({ id, src, dst });
    }
    const tickMs = 0.7;
    for (let now = 0; now < 2000 && network.flowCount > 0; now += tickMs) {
      const before = new Map(flows.map((f) => [f.id, network.delivered(f.id) ?? 0]));
      const events = network.advance(now, now + tickMs);
      const up = new Float64Array(count);
      const down = new Float64Array(count);
      const rackUp = new Float64Array(3);
      const rackDown = new Float64Array(3);
      for (const f of flows) {
        const moved = (network.delivered(f.id) ?? before.get(f.id)!) - before.get(f.id)!;
        up[f.src]! += moved;
        down[f.dst]! += moved;
        const [rs, rd] = [endpoints[f.src]!.rack, endpoints[f.dst]!.rack];
        if (rs !== rd) {
          rackUp[rs]! += moved;
          rackDown[rd]! += moved;
        }
      }
      const slack = 1 + 1e-9;
      for (let e = 0; e < count; e++) {
        assert.ok(up[e]! <= endpoints[e]!.uploadBytesPerMs * tickMs * slack, `seed ${seed}: upload ${e}`);
        assert.ok(
          down[e]! <= endpoints[e]!.downloadBytesPerMs * tickMs * slack,
          `seed ${seed}: download ${e}`,
        );
      }
      for (let r = 0; r < 3; r++) {
        assert.ok(rackUp[r]! <= uplink * tickMs * slack, `seed ${seed}: rack ${r} up`);
        assert.ok(rackDown[r]! <= uplink * tickMs * slack, `seed ${seed}: rack ${r} down`);
      }
      for (const event of events) {
        assert.ok(event.atMs >= now && event.atMs <= now + tickMs, `seed ${seed}: event outside its tick`);
        if (event.kind === 'done') network.remove(event.transferId);
      }
    }
    assert.equal(network.flowCount, 0, `seed ${seed}: flows left after 2 s`);
  }
});

test('each flow says once that it is ending, one notice before it is done', () => {
  const network = new FluidNetwork([host(100, 0), host(0, 100)], 0, 0, 2);
  network.add(1, 0, 1, 1000, 0);
  const events: Array<{ kind: string; atMs: number }> = [];
  for (let now = 0; network.flowCount > 0; now += 3) {
    for (const event of network.advance(now, now + 3)) {
      events.push({ kind: event.kind, atMs: event.atMs });
      if (event.kind === 'done') network.remove(event.transferId);
    }
  }
  assert.deepEqual(events, [
    { kind: 'ending', atMs: 8 },
    { kind: 'done', atMs: 10 },
  ]);
});
