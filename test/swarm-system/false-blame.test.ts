/**
 * Issue 16, finding 2, against a real scheduler over HTTP: hosts that make up corrupt reports (here
 * scripted clients, as an attacker would write them) must not get an honest parent banned or
 * demoted. The scheduler re-checks each accusation with a third host; the liars are found out.
 * Every host here is a scripted client speaking the scheduler's HTTP API (register, sync).
 */

import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { encodeManifest, manifestDigest } from '../../src/manifest/manifest.js';
import { startScheduler, type SchedulerServer } from '../../src/swarm/scheduler/scheduler-server.js';
import { callJson } from '../../src/swarm/wire/http-json.js';
import {
  encodeBitfield,
  parseMessage,
  swarmStatusSchema,
  syncReplySchema,
  type Report,
  type SwarmStatus,
} from '../../src/swarm/wire/protocol.js';
import { fakeManifest } from '../helpers/swarm.js';

const PIECES = 24;
const ROUNDS_MAX = 400;

interface Scripted {
  name: string;
  liar: boolean;
  id: number;
  reports: Report[];
}

describe('made-up corrupt reports against a real scheduler', () => {
  let scheduler: SchedulerServer;
  before(async () => {
    scheduler = await startScheduler({ originReaders: 2 });
  });
  after(async () => {
    await scheduler.close();
  });

  it('bans and demotes no honest host; the liars are distrusted after re-checks', async () => {
    const manifest = fakeManifest(PIECES, 'blame');
    const base = `${scheduler.url}/v1/swarms/${manifestDigest(manifest).slice('sha256:'.length)}`;
    const register = async (name: string, holdsAll: boolean): Promise<number> => {
      const reply = (await callJson(`${base}/hosts`, 'the scheduler', {
        method: 'POST',
        timeoutMs: 5000,
        body: {
          name,
          url: `http://127.0.0.1:9/${name}/`,
          uploadBytesPerSecond: 1e8,
          downloadBytesPerSecond: 1e8,
          have: encodeBitfield(PIECES, () => holdsAll),
          manifest: encodeManifest(manifest).toString('utf8'),
        },
      })) as { host: number };
      return reply.host;
    };
    const status = async (): Promise<SwarmStatus> =>
      parseMessage(swarmStatusSchema, await callJson(base, 'the scheduler', { timeoutMs: 5000 }), 'status');

    await register('parent', true);
    const hosts: Scripted[] = [];
    for (const name of ['liar-1', 'liar-2', 'honest-1', 'honest-2', 'honest-3', 'honest-4']) {
      hosts.push({ name, liar: name.startsWith('liar'), id: await register(name, false), reports: [] });
    }
    // Each round every host syncs: it reports what it was given last round (a liar calls every
    // piece from a peer corrupt) and takes new assignments.
    let rounds = 0;
    for (; rounds < ROUNDS_MAX; rounds++) {
      const now = await status();
      const done = hosts
        .filter((h) => !h.liar)
        .every((h) => now.hosts.find((s) => s.host === h.id)?.complete === true);
      if (done) break;
      for (const host of hosts) {
        const raw = await callJson(`${base}/hosts/${host.id}/sync`, 'the scheduler', {
          method: 'POST',
          timeoutMs: 5000,
          body: { reports: host.reports, waitMs: 0 },
        });
        const reply = parseMessage(syncReplySchema, raw, 'sync');
        host.reports = reply.assignments.map((a) => ({
          transferId: a.transferId,
          outcome: host.liar && a.from !== 'origin' ? ('corrupt' as const) : ('verified' as const),
        }));
      }
    }
    const end = await status();
    console.log(
      `false blame: ${rounds} rounds; ${end.transfersCorrupt} made-up reports; re-checks ${JSON.stringify(end.rechecks)}`,
    );
    assert.ok(rounds < ROUNDS_MAX, 'the honest hosts did not complete');
    assert.ok(end.transfersCorrupt > 0, 'the liars never lied: the test proves nothing');
    for (const host of end.hosts) {
      if (host.name.startsWith('liar')) {
        assert.equal(host.demoted, true, `${host.name} is distrusted (ranks as a demoted parent)`);
      } else {
        assert.equal(host.banned, false, `${host.name} was banned`);
        assert.equal(host.demoted, false, `${host.name} was demoted`);
      }
    }
    assert.ok(end.rechecks.started >= 1, 'no accusation was re-checked');
  });
});
