/**
 * Liveness both ways on the sync channel (issue 16, finding 4): a scheduler that stops answering
 * (SIGSTOP: its sockets stay open) is noticed by the agent within its silence limit, which then
 * carries on alone and registers again once the scheduler answers; the scheduler answers an idle
 * agent's heartbeats, and drops a host that went silent even though its channel is open. An agent
 * whose scheduler refuses it at once still says it joined the model before it says so.
 */

import assert from 'node:assert/strict';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { encodeManifest, manifestDigest } from '../../src/manifest/manifest.js';
import { LocalOrigin } from '../../src/origin/local.js';
import { PieceMap } from '../../src/piece/piece-map.js';
import { PieceStore } from '../../src/piece/store.js';
import { Agent } from '../../src/swarm/agent/agent.js';
import { SwarmMember, type MemberEvent } from '../../src/swarm/agent/member.js';
import { startScheduler } from '../../src/swarm/scheduler/scheduler-server.js';
import { SWARM_SERVICE_DEFAULTS } from '../../src/swarm/scheduler/defaults.js';
import { SwarmService } from '../../src/swarm/scheduler/swarm-service.js';
import { encodeBitfield } from '../../src/swarm/wire/protocol.js';
import { FrameReader, encodeFrame, openChannel } from '../../src/swarm/wire/sync-channel.js';
import { Throttle } from '../../src/util/throttle.js';
import { CLI, startProcess, stopProcess } from '../../scripts/cluster.js';
import { freePort, sameFiles, tempDir, writeSmallModel } from '../helpers/fixtures.js';
import { startFileServer } from '../../src/origin/file-server.js';
import { swarmPull } from '../../src/swarm/swarm-pull.js';
import { buildManifest } from '../../src/manifest/build.js';
import { fakeManifest, registerBareHost, testIdentity } from '../helpers/swarm.js';

async function until(check: () => boolean, ms: number): Promise<boolean> {
  for (const deadline = performance.now() + ms; performance.now() < deadline;) {
    if (check()) return true;
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
  return check();
}

/**
 * A member that holds the whole model (a seed: nothing to fetch, only the scheduler to keep) with
 * its events, and what to close after.
 */
async function seedMember(
  label: string,
  schedulerUrl: string,
  schedulerSilenceMs?: number,
): Promise<{ member: SwarmMember; events: MemberEvent[]; close: () => Promise<void> }> {
  const dir = await tempDir(label);
  const modelDir = join(dir.path, 'model');
  await writeSmallModel(modelDir);
  const origin = new LocalOrigin(modelDir);
  const manifest = await buildManifest(origin, { pieceSize: 64 * 1024 });
  const map = new PieceMap(manifest);
  const store = await PieceStore.open(map, {
    dataDir: join(dir.path, 'partial'),
    stateDir: join(dir.path, 'state'),
    finalDir: modelDir,
  });
  assert.equal(store.complete, true);
  const events: MemberEvent[] = [];
  const member = new SwarmMember({
    model: manifestDigest(manifest).slice('sha256:'.length),
    map,
    manifestBytes: encodeManifest(manifest),
    store,
    origin,
    schedulerUrl,
    identity: testIdentity('a'),
    downloadThrottle: new Throttle(undefined),
    ...(schedulerSilenceMs === undefined ? {} : { schedulerSilenceMs }),
    onEvent: (event) => {
      if (event.type !== 'piece') events.push(event);
    },
  });
  const close = async (): Promise<void> => {
    await member.close();
    await store.close();
    await origin.close();
    await dir.cleanup();
  };
  return { member, events, close };
}

describe('a silent scheduler', { timeout: 60_000 }, () => {
  it('is lost after the silence limit, and joined again when it answers', async () => {
    const scheduler = await startProcess(
      [CLI, 'scheduler', '--port', '0'],
      /listening on (http:\/\/\S+)/,
      'scheduler',
    );
    const { member, events, close } = await seedMember('silent-scheduler', scheduler.url, 1000);
    try {
      member.start();
      const registrations = (): number => events.filter((event) => event.type === 'registered').length;
      assert.ok(await until(() => registrations() === 1, 10_000), 'the member did not register');
      // Idle, the channel stays up: the scheduler answers heartbeats.
      await new Promise((resolve) => setTimeout(resolve, 2500));
      assert.equal(events.filter((event) => event.type === 'scheduler-lost').length, 0, 'lost while idle');
      scheduler.child.kill('SIGSTOP');
      const lost = (): MemberEvent | undefined => events.find((event) => event.type === 'scheduler-lost');
      assert.ok(await until(() => lost() !== undefined, 4000), 'a stopped scheduler was not noticed');
      assert.match((lost() as { reason: string }).reason, /sent nothing for 1 s/);
      scheduler.child.kill('SIGCONT');
      assert.ok(await until(() => registrations() >= 2, 15_000), 'the member did not register again');
    } finally {
      scheduler.child.kill('SIGCONT');
      await close();
      await stopProcess(scheduler);
    }
  });
});

describe('a scheduler that never answers', { timeout: 30_000 }, () => {
  it('is said once (a wrong --scheduler is not silent), not at every retry', async () => {
    const { member, events, close } = await seedMember(
      'unreachable-scheduler',
      `http://127.0.0.1:${await freePort()}`,
    );
    try {
      member.start();
      const lost = (): MemberEvent[] => events.filter((event) => event.type === 'scheduler-lost');
      assert.ok(await until(() => lost().length > 0, 5000), 'an unreachable scheduler was not said');
      assert.match((lost()[0] as { reason: string }).reason, /ECONNREFUSED|unreachable/);
      // Registering is retried every 0.5-2 s meanwhile; none of the retries is said again.
      await new Promise((resolve) => setTimeout(resolve, 3000));
      assert.equal(lost().length, 1, JSON.stringify(lost()));
    } finally {
      await close();
    }
  });
});

describe('a --scheduler URL that some other server answers', { timeout: 30_000 }, () => {
  it('is said once as not a scheduler, and the pull carries on from the origin to the end', async () => {
    const dir = await tempDir('foreign-scheduler');
    const modelDir = join(dir.path, 'model');
    await writeSmallModel(modelDir);
    const local = new LocalOrigin(modelDir);
    const manifest = await buildManifest(local, { pieceSize: 64 * 1024 }).finally(() => local.close());
    // A file server: it answers the scheduler's routes with 404 or 405, as a mistyped port might.
    const other = await startFileServer({ root: modelDir });
    const lost: string[] = [];
    try {
      const result = await swarmPull(other.url, join(dir.path, 'pulled'), {
        manifest,
        schedulerUrl: other.url,
        signal: AbortSignal.timeout(20_000),
        onEvent: (event) => {
          if (event.type === 'scheduler-lost') lost.push(event.reason);
        },
      });
      assert.ok(
        await sameFiles(
          modelDir,
          join(dir.path, 'pulled'),
          manifest.files.map((file) => file.path),
        ),
      );
      assert.equal(result.originBytes, result.bytesTotal);
      // Before, it re-registered forever without fetching, saying so at every retry.
      assert.equal(lost.length, 1, lost.join('\n'));
      assert.match(
        lost[0] as string,
        /answered HTTP 40[45] \(not a weightcast scheduler: check --scheduler\)/,
      );
    } finally {
      await other.close();
      await dir.cleanup();
    }
  });
});

describe('an agent whose scheduler never answers', { timeout: 30_000 }, () => {
  it('says it joined a model before it says there is no scheduler', async () => {
    const dir = await tempDir('agent-no-scheduler');
    const modelDir = join(dir.path, 'model');
    await writeSmallModel(modelDir);
    const local = new LocalOrigin(modelDir);
    const manifest = await buildManifest(local, { pieceSize: 64 * 1024 }).finally(() => local.close());
    const said: string[] = [];
    const agent = await Agent.start({
      schedulerUrl: `http://127.0.0.1:${await freePort()}`,
      cacheDir: join(dir.path, 'cache'),
      onEvent: (event) => {
        if (event.type !== 'piece') said.push(event.type);
      },
    });
    try {
      // A fresh cache: the member registers (and is refused at once) while its store still opens.
      await agent.join({ source: modelDir, manifest });
      assert.ok(await until(() => said.includes('scheduler-lost'), 5000), said.join(', '));
      assert.ok(said.indexOf('joined') >= 0, said.join(', '));
      assert.ok(said.indexOf('joined') < said.indexOf('scheduler-lost'), said.join(', '));
    } finally {
      await agent.close();
      await dir.cleanup();
    }
  });
});

describe('the scheduler side', () => {
  it('answers a heartbeat sync when it has nothing else to say', async () => {
    const scheduler = await startScheduler();
    try {
      const manifest = fakeManifest(4);
      const base = `${scheduler.url}/v1/swarms/${manifestDigest(manifest).slice('sha256:'.length)}`;
      const registered = (await registerBareHost(base, manifest, { name: 'idle' })) as { host: number };
      const { socket, head } = await openChannel(
        `${base}/hosts/${registered.host}/channel`,
        AbortSignal.timeout(5000),
      );
      const reader = new FrameReader();
      const frames: unknown[] = [...reader.push(head)];
      socket.on('data', (chunk: Buffer) => frames.push(...reader.push(chunk)));
      await until(() => false, 300);
      const before = frames.length;
      socket.write(encodeFrame({ reports: [], waitMs: 0 }));
      assert.ok(await until(() => frames.length > before, 2000), 'no answer to a heartbeat');
      assert.deepEqual(frames.at(-1), { assignments: [], cancellations: [] });
      socket.destroy();
    } finally {
      await scheduler.close();
    }
  });

  it('drops a host that said nothing for the host timeout, even with its channel open', () => {
    const manifest = fakeManifest(4);
    const service = new SwarmService(
      manifestDigest(manifest).slice('sha256:'.length),
      new PieceMap(manifest),
      {
        ...SWARM_SERVICE_DEFAULTS,
        hostTimeoutMs: 1000,
      },
    );
    const { host } = service.register(0, {
      name: 'quiet',
      url: 'http://127.0.0.1:9/',
      uploadBytesPerSecond: 1e8,
      downloadBytesPerSecond: 1e8,
      have: encodeBitfield(4, () => false),
    });
    service.park(host, () => undefined);
    service.tick(500);
    assert.notEqual(service.registrationOf(host), undefined, 'dropped too early');
    service.tick(1500);
    assert.equal(service.registrationOf(host), undefined, 'a parked but silent host was kept');
  });
});
