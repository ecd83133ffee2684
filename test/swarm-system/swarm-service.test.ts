import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { describe, it } from 'node:test';
import type { Manifest } from '../../src/manifest/manifest.js';
import { merkleRoot } from '../../src/manifest/merkle.js';
import { PieceMap } from '../../src/piece/piece-map.js';
import { SWARM_SERVICE_DEFAULTS, SwarmService, coreConfig } from '../../src/swarm/scheduler/swarm-service.js';
import { CHAIN_HOP_LAG_BYTES, autoChainMembersMax } from '../../src/swarm/core/ring-plan.js';
import {
  encodeBitfield,
  type Registered,
  type Report,
  type WireAssignment,
} from '../../src/swarm/wire/protocol.js';

function fakeManifest(pieces: number, pieceSize = 65536): Manifest {
  const digests = Array.from({ length: pieces }, (_, i) =>
    createHash('sha256').update(`p${i}`).digest('hex'),
  );
  return {
    pieceSize,
    files: [{ path: 'w.bin', size: pieces * pieceSize, merkleRoot: merkleRoot(digests), pieces: digests }],
  };
}

function register(
  service: SwarmService,
  now: number,
  name: string,
  held: readonly number[] = [],
  rack?: string,
): number {
  const set = new Set(held);
  return service.register(now, {
    name,
    url: `http://127.0.0.1:1/${name}`,
    uploadBytesPerSecond: 1e8,
    downloadBytesPerSecond: 1e8,
    have: encodeBitfield(service.map.pieceCount, (p) => set.has(p)),
    ...(rack === undefined ? {} : { rack }),
  }).host;
}

/** Registers `name` and returns the ring news its registration's answer carried (undefined: none). */
/** A host holding nothing registers; the registration's whole answer. */
function registerAnswer(service: SwarmService, now: number, name: string): Registered {
  return service.register(now, {
    name,
    url: `http://127.0.0.1:1/${name}`,
    uploadBytesPerSecond: 1e8,
    downloadBytesPerSecond: 1e8,
    have: encodeBitfield(service.map.pieceCount, () => false),
  });
}

function registerRing(service: SwarmService, now: number, name: string): [number, unknown] {
  const reply = registerAnswer(service, now, name);
  return [reply.host, reply.ring];
}

describe('SwarmService (scheduler shell, fake time)', () => {
  it('drives hosts to completion with the origin sending each piece about once and no transfer left open', () => {
    const seed = 7;
    const service = new SwarmService('ab'.repeat(32), new PieceMap(fakeManifest(40)), {
      ...SWARM_SERVICE_DEFAULTS,
      originReaders: 2,
      randomSeed: seed,
    });
    let now = 0;
    const hosts = ['h0', 'h1', 'h2', 'h3', 'h4'].map((name) => register(service, now, name));
    const pending = new Map<number, WireAssignment[]>(hosts.map((h) => [h, []]));
    const cancelled = new Set<number>();
    for (let round = 0; round < 500 && !hosts.every((h) => service.core.isComplete(h)); round++) {
      now += 10;
      for (const host of hosts) {
        // Each host finishes the oldest of its transfers per round (a deterministic, uneven pace).
        const queue = pending.get(host)!;
        const reports: Report[] = [];
        // h0 is slow, so its last pieces get hedged and the losing twins cancelled.
        const done =
          host === hosts[0] ? (round % 4 === 0 ? queue.splice(0, 1) : []) : queue.splice(0, 1 + (round % 2));
        for (const assignment of done) {
          if (!cancelled.has(assignment.transferId))
            reports.push({ transferId: assignment.transferId, outcome: 'verified' });
        }
        service.sync(now, host, { reports, waitMs: 0 });
        const reply = service.takeReply(host);
        for (const id of reply.cancellations) cancelled.add(id);
        queue.push(...reply.assignments);
      }
    }
    assert.ok(
      hosts.every((h) => service.core.isComplete(h)),
      `not complete (seed ${seed})`,
    );
    assert.ok(cancelled.size > 0, `no transfer was cancelled, so this test proves nothing (seed ${seed})`);
    const origin = service.status().originBytesAssigned / service.map.totalBytes;
    assert.ok(origin <= 1.2, `origin sent ${origin} x S (seed ${seed})`);
    // Cancelled transfers are closed by the service itself, so nothing stays in flight.
    service.tick(now + 1);
    assert.equal(
      service.core.stats.transfersAssigned,
      service.core.stats.transfersVerified +
        service.core.stats.transfersCancelled +
        service.core.stats.transfersFailed +
        service.core.stats.transfersCorrupt,
    );
  });

  it('ignores reports about transfers of other hosts and drops hosts that go silent', () => {
    const service = new SwarmService('cd'.repeat(32), new PieceMap(fakeManifest(4)), {
      ...SWARM_SERVICE_DEFAULTS,
      hostTimeoutMs: 1000,
    });
    const a = register(service, 0, 'a');
    const b = register(service, 0, 'b');
    service.sync(0, a, { reports: [], waitMs: 0 });
    const toA = service.takeReply(a).assignments;
    assert.ok(toA.length > 0);
    // b claims a's transfer: nothing changes for a.
    service.sync(1, b, {
      reports: toA.map((x) => ({ transferId: x.transferId, outcome: 'verified' as const })),
      waitMs: 0,
    });
    assert.equal(service.core.heldCount(a), 0);
    assert.equal(service.core.heldCount(b), 0);
    // a keeps talking, b goes silent and is dropped.
    service.sync(900, a, { reports: [], waitMs: 0 });
    service.tick(1500);
    assert.deepEqual(
      service.status().hosts.map((h) => h.name),
      ['a'],
    );
    assert.throws(() => service.sync(1600, b, { reports: [], waitMs: 0 }), { code: 'SWARM_UNKNOWN_HOST' });
    // Registering again under the same name replaces the old registration.
    const again = register(service, 1700, 'a', [0, 1]);
    assert.deepEqual(
      service.status().hosts.map((h) => [h.name, h.held]),
      [['a', 2]],
    );
    assert.throws(() => service.sync(1701, a === again ? -1 : a, { reports: [], waitMs: 0 }), {
      code: 'SWARM_UNKNOWN_HOST',
    });
  });

  it('a host that leaves with blame keeps its mark and its id: no newcomer inherits it, and it gets it back', () => {
    const service = new SwarmService('cf'.repeat(32), new PieceMap(fakeManifest(4)), {
      ...SWARM_SERVICE_DEFAULTS,
      hostTimeoutMs: 1000,
    });
    const parent = register(service, 0, 'parent', [0, 1, 2, 3]);
    const liar = register(service, 0, 'liar', [0, 1, 2]);
    // The liar calls piece 3 from the parent corrupt.
    service.sync(1, liar, { reports: [], waitMs: 0 });
    const [lie] = service.takeReply(liar).assignments;
    assert.deepEqual([lie?.piece, lie?.peer], [3, parent]);
    service.sync(2, liar, { reports: [{ transferId: lie!.transferId, outcome: 'corrupt' }], waitMs: 0 });
    const prober = register(service, 3, 'prober', [0]);
    // The scheduler has the prober re-check piece 3 from the parent; the prober's copy verifies.
    service.sync(3, prober, { reports: [], waitMs: 0 });
    const toProber = service.takeReply(prober).assignments;
    assert.ok(
      toProber.some((a) => a.piece === 3 && a.peer === parent),
      'the prober fetches piece 3 from the parent',
    );
    service.sync(4, prober, {
      reports: toProber.map((a) => ({ transferId: a.transferId, outcome: 'verified' as const })),
      waitMs: 0,
    });
    assert.equal(service.core.stats.rechecksRefuted, 1, 'the re-check refuted the lie');
    assert.ok(service.core.isBlamed(liar) && service.core.isDemoted(liar));
    // The liar goes silent and is dropped; a newcomer does not get its id, the liar does.
    service.sync(900, parent, { reports: [], waitMs: 0 });
    service.sync(900, prober, { reports: [], waitMs: 0 });
    service.tick(1500);
    const newcomer = register(service, 1600, 'newcomer');
    assert.notEqual(newcomer, liar);
    assert.equal(service.core.isDemoted(newcomer), false);
    assert.equal(register(service, 1700, 'liar', [0, 1, 2]), liar);
    assert.equal(service.core.isDemoted(liar), true, 'the mark stays with the name');
  });

  it('a host whose corrupt reports keep failing re-checks is removed with SWARM_DISTRUSTED, and stays out', () => {
    const service = new SwarmService('d0'.repeat(32), new PieceMap(fakeManifest(48)), {
      ...SWARM_SERVICE_DEFAULTS,
      hostTimeoutMs: 60_000,
    });
    const all = Array.from({ length: 48 }, (_, i) => i);
    register(service, 0, 'parent', all);
    const honest = ['h1', 'h2', 'h3'].map((name) => ({ name, id: register(service, 0, name), liar: false }));
    const liar = { name: 'liar', id: register(service, 0, 'liar'), liar: true };
    const pending = new Map<number, Report[]>();
    let refused: unknown;
    for (let round = 1; round <= 200 && refused === undefined; round++) {
      for (const host of [...honest, liar]) {
        try {
          service.sync(round, host.id, { reports: pending.get(host.id) ?? [], waitMs: 0 });
        } catch (error) {
          refused = error;
          break;
        }
        pending.set(
          host.id,
          service.takeReply(host.id).assignments.map((a) => ({
            transferId: a.transferId,
            // The liar calls everything corrupt, as a host whose memory garbles what it receives would.
            outcome: host.liar ? ('corrupt' as const) : ('verified' as const),
          })),
        );
      }
    }
    assert.equal((refused as { code?: string } | undefined)?.code, 'SWARM_DISTRUSTED');
    assert.ok(!service.status().hosts.some((h) => h.name === 'liar'), 'the liar was removed');
    assert.throws(() => register(service, 300, 'liar'), { code: 'SWARM_DISTRUSTED' });
    for (const host of service.status().hosts) assert.equal(host.demoted || host.banned, false, host.name);
  });

  it('a registration cannot take over a live host: another address is refused until that host goes silent', () => {
    const service = new SwarmService('ce'.repeat(32), new PieceMap(fakeManifest(4)), {
      ...SWARM_SERVICE_DEFAULTS,
      hostTimeoutMs: 1000,
    });
    const victim = register(service, 0, 'a', [0]);
    const impostor = {
      name: 'a',
      url: 'http://127.0.0.2:1/elsewhere',
      uploadBytesPerSecond: 1e8,
      downloadBytesPerSecond: 1e8,
      have: encodeBitfield(4, () => true),
    };
    assert.throws(() => service.register(500, impostor), { code: 'SWARM_NAME_IN_USE' });
    // The live host is untouched: same id, same address, same pieces.
    assert.deepEqual(
      service.status().hosts.map((h) => [h.host, h.url, h.held]),
      [[victim, 'http://127.0.0.1:1/a', 1]],
    );
    service.sync(900, victim, { reports: [], waitMs: 0 });
    assert.throws(() => service.register(1800, impostor), { code: 'SWARM_NAME_IN_USE' });
    // The same agent restarting (same name, same address) replaces its old registration at once.
    const restarted = register(service, 1850, 'a', [0, 1]);
    assert.deepEqual(
      service.status().hosts.map((h) => [h.host, h.held]),
      [[restarted, 2]],
    );
    // A host silent past its timeout may be replaced from anywhere (it moved, or it is gone).
    const moved = service.register(1850 + 1001, impostor).host;
    assert.deepEqual(
      service.status().hosts.map((h) => [h.host, h.url]),
      [[moved, 'http://127.0.0.2:1/elsewhere']],
    );
  });

  it('lists the peers in the registration answer, then in a reply only when hosts joined or left since the last one', () => {
    const service = new SwarmService('ab'.repeat(32), new PieceMap(fakeManifest(8)), SWARM_SERVICE_DEFAULTS);
    const peersOnJoining = (name: string): [number, string[] | undefined] => {
      const answer = registerAnswer(service, 0, name);
      return [answer.host, answer.peers];
    };
    const [a, aPeers] = peersOnJoining('a');
    assert.deepEqual(aPeers, []);
    assert.equal(service.takeReply(a).peers, undefined, 'sent with the registration: not again');
    const [b, bPeers] = peersOnJoining('b');
    assert.deepEqual(bPeers, ['http://127.0.0.1:1/a'], 'the hosts that joined before it');
    assert.deepEqual(service.takeReply(a).peers, ['http://127.0.0.1:1/b']);
    assert.equal(service.takeReply(a).peers, undefined, 'unchanged: not sent again');
    assert.equal(service.takeReply(b).peers, undefined);
    const c = register(service, 0, 'c');
    assert.deepEqual(service.takeReply(a).peers, ['http://127.0.0.1:1/b', 'http://127.0.0.1:1/c']);
    service.leave(0, c);
    assert.deepEqual(service.takeReply(b).peers, ['http://127.0.0.1:1/a']);
    assert.equal(service.takeReply(b).peers, undefined);
    // Every other host gone: the now empty list is sent, so the member forgets them.
    service.leave(0, a);
    assert.deepEqual(service.takeReply(b).peers, []);
  });

  it('answers a waiting sync with the peer list when a rack-mate joins or leaves, and only then', () => {
    const service = new SwarmService('ab'.repeat(32), new PieceMap(fakeManifest(8)), SWARM_SERVICE_DEFAULTS);
    const a = register(service, 0, 'a', [], 'r1');
    service.takeReply(a);
    let woken = 0;
    service.park(a, () => woken++);
    register(service, 0, 'elsewhere', [], 'r2');
    assert.equal(woken, 0, 'a host of another rack: the list waits for the next work');
    assert.equal(service.hasReply(a), false);
    const b = register(service, 0, 'b', [], 'r1');
    assert.equal(woken, 1, 'a rack-mate: told at once');
    assert.equal(service.hasReply(a), true);
    const reply = service.takeReply(a);
    assert.deepEqual(reply.peers, ['http://127.0.0.1:1/b', 'http://127.0.0.1:1/elsewhere']);
    assert.equal(reply.rackPeers, 1);
    assert.equal(service.hasReply(a), false, 'told once');
    service.park(a, () => woken++);
    service.leave(0, b);
    assert.equal(woken, 2, 'a rack-mate that leaves: told at once too');
    assert.deepEqual(service.takeReply(a).peers, ['http://127.0.0.1:1/elsewhere']);
  });

  it("lists a host's rack-mates first, and how many they are, for its fallback", () => {
    const service = new SwarmService('ab'.repeat(32), new PieceMap(fakeManifest(8)), SWARM_SERVICE_DEFAULTS);
    const a = register(service, 0, 'a', [], 'r1');
    register(service, 0, 'b', [], 'r2');
    register(service, 0, 'c', [], 'r1');
    const reply = service.takeReply(a);
    assert.deepEqual(reply.peers, ['http://127.0.0.1:1/c', 'http://127.0.0.1:1/b']);
    assert.equal(reply.rackPeers, 1);
    // A host without a rack gets the list alone (here in its registration's answer).
    const plain = registerAnswer(service, 0, 'd');
    assert.equal(plain.peers?.length, 3);
    assert.equal(plain.rackPeers, undefined);
  });

  it('plans the next download when an agent says a transfer is ending (pipelining), and only its own', () => {
    const service = new SwarmService('cd'.repeat(32), new PieceMap(fakeManifest(12)), {
      ...SWARM_SERVICE_DEFAULTS,
      originReaders: 1,
      downloadsPerHost: 1,
    });
    const a = register(service, 0, 'a');
    const b = register(service, 0, 'b');
    const first = service.takeReply(a).assignments;
    assert.equal(first.length, 1, 'one download slot, one origin reader: one transfer for a');
    service.takeReply(b);
    // b may not announce a's transfer as ending: nothing changes.
    service.sync(10, b, { reports: [], waitMs: 0, ending: [first[0]!.transferId] });
    assert.equal(service.takeReply(a).assignments.length, 0);
    // a announces it: the origin's reader is planned again before the report (it goes to b, which
    // has had nothing so far), and a's download slot is free for the next piece.
    service.sync(20, a, { reports: [], waitMs: 0, ending: [first[0]!.transferId] });
    const next = [...service.takeReply(a).assignments, ...service.takeReply(b).assignments];
    assert.equal(next.length, 1, 'the next origin read is assigned while the first is ending');
    assert.notEqual(next[0]!.piece, first[0]!.piece);
    assert.equal(service.status().transfersInFlight, 2);
    // Announcing twice is harmless; the report then closes the first transfer as usual.
    service.sync(30, a, { reports: [], waitMs: 0, ending: [first[0]!.transferId] });
    assert.equal(service.takeReply(a).assignments.length + service.takeReply(b).assignments.length, 0);
    service.sync(40, a, { reports: [{ transferId: first[0]!.transferId, outcome: 'verified' }], waitMs: 0 });
    assert.equal(service.core.heldCount(a), 1);
    service.core.checkInvariants();
  });
  it('hands out transfer units as runs of pieces, and counts a host holding part of a unit as lacking it', () => {
    const seed = 11;
    // Two files: 7 and 5 pieces; units of 3: [0-2] [3-5] [6] | [7-9] [10-11].
    const digests = (file: number, n: number): string[] =>
      Array.from({ length: n }, (_, i) => createHash('sha256').update(`${file}/${i}`).digest('hex'));
    const manifest: Manifest = {
      pieceSize: 65536,
      files: [
        { path: 'a.bin', size: 7 * 65536, merkleRoot: merkleRoot(digests(0, 7)), pieces: digests(0, 7) },
        { path: 'b.bin', size: 5 * 65536, merkleRoot: merkleRoot(digests(1, 5)), pieces: digests(1, 5) },
      ],
    };
    const service = new SwarmService('e1'.repeat(32), new PieceMap(manifest), {
      ...SWARM_SERVICE_DEFAULTS,
      randomSeed: seed,
      transferUnitPieces: 3,
    });
    assert.equal(service.units.count, 5);
    // The core sees units as its pieces, and hedges a host's last 10 of them.
    const config = coreConfig(service.units, { ...SWARM_SERVICE_DEFAULTS, hedgeTailPieces: 10 });
    assert.equal(config.pieceCount, 5);
    assert.equal(config.pieceBytes, 3 * 65536);
    assert.equal(config.hedgeTailPieces, 10);
    // A host holding pieces 0-2 (a whole unit) and 3 (a third of one) holds one unit.
    const resumed = register(service, 0, 'resumed', [0, 1, 2, 3]);
    const fresh = register(service, 0, 'fresh');
    assert.equal(service.core.heldCount(resumed), 1);
    const runs = new Set<string>();
    const pending = new Map<number, WireAssignment[]>([
      [resumed, []],
      [fresh, []],
    ]);
    let now = 0;
    for (let round = 0; round < 200 && ![resumed, fresh].every((h) => service.core.isComplete(h)); round++) {
      now += 10;
      for (const host of [resumed, fresh]) {
        const queue = pending.get(host)!;
        const reports: Report[] = queue
          .splice(0)
          .map((a) => ({ transferId: a.transferId, outcome: 'verified' }));
        service.sync(now, host, { reports, waitMs: 0 });
        for (const assignment of service.takeReply(host).assignments) {
          runs.add(`${assignment.piece}+${assignment.count ?? 1}`);
          queue.push(assignment);
        }
      }
    }
    assert.ok(
      [resumed, fresh].every((h) => service.core.isComplete(h)),
      `not complete (seed ${seed})`,
    );
    // Every assignment is a whole unit; none crosses from a.bin into b.bin.
    for (const run of runs) assert.ok(['0+3', '3+3', '6+1', '7+3', '10+2'].includes(run), run);
    assert.ok(runs.has('3+3'), 'the partly held unit was assigned whole; the agent skips what it holds');
    // The origin's bytes are counted per unit, each unit's own length.
    assert.equal(service.status().originBytesAssigned % 65536, 0);
    assert.ok(service.status().originBytesAssigned <= 2 * service.map.totalBytes);
  });
});

describe('SwarmService in ring mode (fake time)', () => {
  const ringService = (ringChain = false): SwarmService =>
    new SwarmService('cd'.repeat(32), new PieceMap(fakeManifest(40)), {
      ...SWARM_SERVICE_DEFAULTS,
      ringPush: true,
      ...(ringChain ? { ringChain } : {}),
    });
  /** Four hosts named PREFIX0-3, registered in that order, their first replies taken. */
  const fourHosts = (service: SwarmService, prefix: string): [number, number, number, number] => {
    const hosts = [0, 1, 2, 3].map((i) => register(service, 0, `${prefix}${i}`));
    for (const host of hosts) service.takeReply(host);
    return hosts as [number, number, number, number];
  };
  /** `host` reports its feed from the host named `parent` lost. */
  const feedLost = (service: SwarmService, now: number, host: number, parent: string, why: string): void =>
    service.sync(now, host, {
      reports: [],
      waitMs: 0,
      ringLost: why,
      ringLostParent: `http://127.0.0.1:1/${parent}`,
    });
  const parentOf = (service: SwarmService, host: number): string | undefined | null => {
    const reply = service.takeReply(host);
    return reply.ring === undefined ? null : reply.ring.parent;
  };

  it('tells each host its ring parent, bridges a host that leaves, and counts pushed pieces', () => {
    const service = ringService();
    const [a] = registerRing(service, 0, 'r0');
    const [b, bRing] = registerRing(service, 0, 'r1');
    const [c, cRing] = registerRing(service, 0, 'r2');
    // A newcomer's place comes with its registration's answer; a member whose parent changed later
    // hears it in its next reply.
    assert.deepEqual(bRing, { parent: 'http://127.0.0.1:1/r0' });
    assert.deepEqual(cRing, { parent: 'http://127.0.0.1:1/r1' });
    assert.equal(parentOf(service, a), 'http://127.0.0.1:1/r2');
    assert.equal(parentOf(service, b), null, 'told once');
    assert.equal(parentOf(service, c), null);
    assert.equal(parentOf(service, a), null, 'told once');
    assert.ok(
      [a, b, c].every((host) => service.core.isRingFed(host)),
      'fed hosts are planned first copies only',
    );
    service.sync(10, b, { reports: [], waitMs: 0, held: [3, 4, 999] });
    assert.equal(service.core.hasPiece(b, 3), true);
    assert.equal(service.core.hasPiece(b, 4), true);
    service.leave(20, b);
    assert.equal(parentOf(service, c), 'http://127.0.0.1:1/r0', 'bridged over the host that left');
  });

  it('a failed feed puts the parent out of the ring (once per host; then the host is cut); a stalled link is cut', () => {
    const service = ringService();
    const [a, b, c, d] = fourHosts(service, 's');
    // Ring s0 -> s1 -> s2 -> s3 -> s0. s2's feed from s1 failed: s1 leaves the ring, s2 is fed by s0.
    feedLost(service, 10, c, 's1', 'the ring parent sent corrupt bytes');
    assert.equal(service.core.isRingFed(b), false, 'the parent is planned per piece');
    assert.equal(parentOf(service, b), undefined, 'and told it has no ring parent now');
    assert.equal(parentOf(service, c), 'http://127.0.0.1:1/s0', 'the ring closed over the gap');
    assert.equal(service.core.isRingFed(c), true);
    assert.deepEqual(service.status().ring, { members: 3, fed: 3, cut: 0 });
    // s3's feed from s2 failed just after s2's own: s2 passed that corrupt piece on as it arrived.
    // Not s2's fault: s3 is told to subscribe to s2 again, and nobody leaves the ring.
    service.takeReply(d);
    feedLost(service, 10.5, d, 's2', 'piece 18 pushed by the ring parent does not match');
    assert.equal(parentOf(service, d), 'http://127.0.0.1:1/s2', 'subscribe to s2 again');
    assert.equal(service.core.isRingFed(c), true);
    assert.equal(service.core.isRingFed(d), true);
    assert.deepEqual(service.status().ring, { members: 3, fed: 3, cut: 0 });
    // A report about a parent since replaced is old news.
    feedLost(service, 11, c, 's1', 'late');
    assert.deepEqual(service.status().ring, { members: 3, fed: 3, cut: 0 });
    // s1 restarted (same name) stays out of the ring.
    service.leave(12, b);
    const b2 = register(service, 12, 's1');
    assert.equal(service.core.isRingFed(b2), false);
    assert.equal(parentOf(service, b2), null, 'not a ring member: no ring news at all');
    // A second failure at s2 cuts s2 itself: one host cannot strip its ring of parents.
    feedLost(service, 13, c, 's0', 'again');
    assert.equal(service.core.isRingFed(c), false);
    assert.equal(parentOf(service, c), undefined);
    assert.deepEqual(service.status().ring, { members: 3, fed: 2, cut: 1 });
    assert.equal(service.core.isRingFed(a), true, 's0 stays in the ring');
  });

  it('in a chain, a parent whose push failed goes to the tail: still pushed every piece, feeding nobody', () => {
    const service = ringService(true);
    const [, b, c, d] = fourHosts(service, 'u');
    // u0 -> u1 -> u2 -> u3; u2's feed from u1 failed.
    feedLost(service, 10, c, 'u1', 'corrupt');
    assert.equal(parentOf(service, c), 'http://127.0.0.1:1/u0', 'u2 is fed by u0 now');
    assert.equal(parentOf(service, b), 'http://127.0.0.1:1/u3', 'u1 is at the tail, fed by u3');
    assert.equal(parentOf(service, d), null, 'u3 keeps its parent (u2)');
    assert.equal(service.core.isRingFed(b), true);
    assert.deepEqual(service.status().ring, { members: 4, fed: 3, cut: 0 });
  });

  it("tells a chain's head that it heads it, and the next member once the head leaves; a ring has no head", () => {
    const service = ringService(true);
    const [h0, h0Ring] = registerRing(service, 0, 'v0');
    const [h1, h1Ring] = registerRing(service, 0, 'v1');
    assert.deepEqual(h0Ring, { head: true, chain: true });
    assert.deepEqual(h1Ring, { parent: 'http://127.0.0.1:1/v0', chain: true });
    assert.equal(service.takeReply(h0).ring, undefined, 'v0 still heads it: no news');
    service.leave(5, h0);
    assert.deepEqual(service.takeReply(h1).ring, { head: true, chain: true }, 'v1 heads the chain now');
    const ring = ringService();
    const [, r0Ring] = registerRing(ring, 0, 'w0');
    assert.deepEqual(r0Ring, {}, 'alone in a ring: no parent, and no head');
  });

  it('in a chain, a corrupt piece passed on: the reports in either order close over the host it came from', () => {
    const service = ringService(true);
    const [a, b, c, d] = fourHosts(service, 'x');
    // x0 -> x1 -> x2 -> x3; x0 pushed a corrupt piece, x1 passed it on as it arrived, and x2's
    // report came in first: x1 goes to the tail (x0 -> x2 -> x3 -> x1).
    feedLost(service, 10, c, 'x1', 'piece 3 pushed by the ring parent does not match');
    assert.equal(parentOf(service, c), 'http://127.0.0.1:1/x0');
    assert.equal(parentOf(service, b), 'http://127.0.0.1:1/x3');
    // Then x1's own report, about x0 (its parent before it moved): x0 goes to the tail instead.
    feedLost(service, 10.4, b, 'x0', 'piece 3 pushed by the ring parent does not match');
    assert.deepEqual(service.takeReply(c).ring, { head: true, chain: true }, 'x2 heads the chain');
    assert.equal(parentOf(service, a), 'http://127.0.0.1:1/x1', 'x0 is at the tail');
    assert.equal(parentOf(service, d), null, 'x3 keeps x2');
    assert.deepEqual(service.status().ring, { members: 4, fed: 3, cut: 0 });
  });

  it('in a chain, a corrupt piece cut through several hops: its reports, in any order, move only the host it came from', () => {
    const service = ringService(true);
    const names = ['k0', 'k1', 'k2', 'k3', 'k4'];
    const hosts = names.map((name) => register(service, 0, name));
    for (const host of hosts) service.takeReply(host);
    // k0 -> k1 -> k2 -> k3 -> k4; k1 pushed piece 7 corrupt, and k2 and k3 passed it on as it
    // arrived. Their reports come in scrambled.
    const corrupt = (now: number, host: number, parent: string): void =>
      service.sync(now, host, {
        reports: [],
        waitMs: 0,
        ringLost: 'piece 7 pushed by the ring parent does not match',
        ringLostParent: `http://127.0.0.1:1/${parent}`,
        ringLostPiece: 7,
      });
    corrupt(10, hosts[4]!, 'k3');
    corrupt(30, hosts[2]!, 'k1');
    corrupt(50, hosts[3]!, 'k2');
    service.tick(100);
    assert.deepEqual(service.status().ring, { members: 5, fed: 4, cut: 0 }, 'nothing moves within the batch');
    service.tick(120);
    assert.equal(parentOf(service, hosts[2]!), 'http://127.0.0.1:1/k0', 'k2 is fed by k0 now');
    assert.equal(parentOf(service, hosts[1]!), 'http://127.0.0.1:1/k4', 'k1 went to the tail');
    assert.equal(parentOf(service, hosts[3]!), 'http://127.0.0.1:1/k2', 'k3 subscribes to k2 again');
    assert.equal(parentOf(service, hosts[4]!), 'http://127.0.0.1:1/k3', 'k4 subscribes to k3 again');
    assert.deepEqual(service.status().ring, { members: 5, fed: 4, cut: 0 }, 'no honest host cut');
    // The core weighs the push as a corrupt transfer from k1 to k2 (k2 fetches nothing more from
    // it): the hosts that passed it on accuse nobody.
    assert.deepEqual(service.core.bannedParents(hosts[2]!), [hosts[1]]);
    for (const host of [hosts[0]!, hosts[1]!, hosts[3]!, hosts[4]!])
      assert.deepEqual(service.core.bannedParents(host), [], `host ${host} banned nobody`);
  });

  it('in a ring, the same two reports in that order: the host put out comes back, the one it named leaves', () => {
    const service = ringService();
    const [a, b, c] = fourHosts(service, 'y');
    // y0 -> y1 -> y2 -> y3 -> y0; y2 reports y1 first: y1 leaves the ring.
    feedLost(service, 10, c, 'y1', 'corrupt');
    assert.equal(service.core.isRingFed(b), false);
    service.takeReply(b);
    // y1's report about y0 follows: y1 comes back, y0 leaves.
    feedLost(service, 10.2, b, 'y0', 'corrupt');
    assert.equal(service.core.isRingFed(a), false, 'y0 is planned per piece');
    assert.equal(parentOf(service, a), undefined, 'and told it has no ring parent');
    assert.equal(service.core.isRingFed(b), true, 'y1 is back in the ring');
    assert.equal(parentOf(service, b), 'http://127.0.0.1:1/y3');
    assert.equal(parentOf(service, c), 'http://127.0.0.1:1/y1');
    assert.deepEqual(service.status().ring, { members: 3, fed: 3, cut: 0 });
  });

  it('cuts a host whose ring link stalled: it is planned per piece again', () => {
    const service = ringService();
    const [a, b, c] = ['t0', 't1', 't2'].map((name) => register(service, 0, name)) as [
      number,
      number,
      number,
    ];
    for (const host of [a, b, c]) service.takeReply(host);
    // c's parent (b) holds pieces c lacks and nothing reaches c: the link stalls and is cut.
    service.sync(20, b, { reports: [], waitMs: 0, held: [1, 2] });
    let now = 20;
    for (; now < 10_000 && service.core.isRingFed(c); now += 100) {
      for (const host of [a, b, c]) service.sync(now, host, { reports: [], waitMs: 0 });
      service.tick(now);
    }
    assert.equal(service.core.isRingFed(c), false, 'the stalled link was cut');
    assert.ok(now >= 2000, `cut at ${now} ms, before the stall time`);
  });
});

describe('SwarmService by default (auto: one chain while it is short enough)', () => {
  const PIECE = 1024 * 1024;
  const autoService = (pieces: number): SwarmService =>
    new SwarmService('ef'.repeat(32), new PieceMap(fakeManifest(pieces, PIECE)), {
      ...SWARM_SERVICE_DEFAULTS,
      ringAuto: true,
    });

  it('the rule: a chain of n costs n x CHAIN_HOP_LAG_BYTES of the model, 3 % at most', () => {
    assert.equal(autoChainMembersMax(256 * 1024 * 1024), 15);
    assert.equal(autoChainMembersMax(10e9), 572);
    assert.equal(autoChainMembersMax(10 * CHAIN_HOP_LAG_BYTES), 0);
  });

  it('a model too small for a chain of two is planned per piece', () => {
    const service = autoService(8);
    const host = register(service, 0, 'z0');
    assert.equal(service.takeReply(host).ring, undefined, 'no ring news: not in ring mode');
    assert.equal(service.status().ring, undefined);
  });

  it('hosts form one chain up to the limit; the next host turns the whole swarm per piece', () => {
    // 120 MiB: a chain of 7 at most (0.03 x 120 MiB / 512 KiB = 7.2).
    const pieces = 120;
    const max = autoChainMembersMax(pieces * PIECE);
    const service = autoService(pieces);
    const joined = Array.from({ length: max }, (_, i) => registerRing(service, i, `a${i}`));
    const hosts = joined.map(([host]) => host);
    assert.deepEqual(joined[0]![1], { head: true, chain: true });
    for (let i = 1; i < max; i++) {
      assert.deepEqual(joined[i]![1], { parent: `http://127.0.0.1:1/a${i - 1}`, chain: true });
      assert.equal(service.core.isRingFed(hosts[i]!), true);
    }
    assert.deepEqual(service.status().ring, { members: max, fed: max - 1, cut: 0 });
    const [late, lateRing] = registerRing(service, max, `a${max}`);
    assert.equal(lateRing, undefined, 'the newcomer is in no chain');
    assert.equal(service.takeReply(late).ring, undefined);
    for (const host of hosts) {
      assert.deepEqual(service.takeReply(host).ring, {}, 'every member is told it has no parent');
      assert.equal(service.core.isRingFed(host), false, 'and is planned per piece');
    }
    assert.deepEqual(service.status().ring, { members: 0, fed: 0, cut: 0 });
    // For good: a host that comes later stays out too.
    const [later, laterRing] = registerRing(service, max + 1, 'b0');
    assert.equal(laterRing, undefined);
    assert.equal(service.takeReply(later).ring, undefined);
  });
});
