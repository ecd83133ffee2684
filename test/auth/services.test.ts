/**
 * Cluster credentials on the real services over loopback sockets (issue 16, finding 3): the
 * scheduler, the catalog, a seed node and an agent's peer API (HTTP and the peer wire) answer 401
 * without a valid credential and 403 to a member on an operator's route, and change nothing; a whole
 * swarm pull with tokens delivers the model through a peer; a service on a non-loopback address
 * without a credential does not start.
 */

import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { ServiceAccess } from '../../src/auth/transport.js';
import { runCli } from '../../src/cli/main.js';
import { memoryIo } from '../../src/cli/io.js';
import { errorEntry, isWeightcastError } from '../../src/errors.js';
import { buildManifest } from '../../src/manifest/build.js';
import { manifestDigest, type Manifest } from '../../src/manifest/manifest.js';
import { LocalOrigin } from '../../src/origin/local.js';
import { PieceMap } from '../../src/piece/piece-map.js';
import { CatalogClient } from '../../src/seed/catalog/client.js';
import { catalogRoutes } from '../../src/seed/catalog/routes.js';
import { CatalogStore } from '../../src/seed/catalog/store.js';
import { SeedNodeClient } from '../../src/seed/node/client.js';
import { SeedNode } from '../../src/seed/node/seed-node.js';
import { Agent } from '../../src/swarm/agent/agent.js';
import { PeerWireClient } from '../../src/swarm/agent/peer-wire-client.js';
import { startScheduler, type SchedulerServer } from '../../src/swarm/scheduler/scheduler-server.js';
import { swarmPull } from '../../src/swarm/swarm-pull.js';
import { callJson } from '../../src/swarm/wire/http-json.js';
import { openChannel } from '../../src/swarm/wire/sync-channel.js';
import { sameFiles, tempDir, writeSmallModel } from '../helpers/fixtures.js';
import { registerBareHost } from '../helpers/swarm.js';

const CLUSTER = randomBytes(24).toString('hex');
const OPERATOR = randomBytes(24).toString('hex');
const credentials = { clusterToken: CLUSTER, operatorToken: OPERATOR };
const member: ServiceAccess = { token: CLUSTER };
const operator: ServiceAccess = { token: OPERATOR };
const stranger: ServiceAccess = { token: randomBytes(24).toString('hex') };

let work: { path: string; cleanup: () => Promise<void> };
let modelDir: string;
let manifest: Manifest;
let hex: string;

const rejectsWith = (code: 'UNAUTHORIZED' | 'FORBIDDEN') => (error: unknown) =>
  isWeightcastError(error, code);

before(async () => {
  work = await tempDir('auth-services');
  modelDir = join(work.path, 'model');
  await writeSmallModel(modelDir);
  const origin = new LocalOrigin(modelDir);
  manifest = await buildManifest(origin, { pieceSize: 64 * 1024 }).finally(() => origin.close());
  hex = manifestDigest(manifest).slice('sha256:'.length);
});

after(async () => {
  await work.cleanup();
});

async function status(url: string, init: RequestInit = {}): Promise<number> {
  const response = await fetch(url, init);
  await response.arrayBuffer();
  return response.status;
}

describe('cluster credentials on the services', { timeout: 60_000 }, () => {
  let catalog: CatalogStore;
  let scheduler: SchedulerServer;

  before(async () => {
    catalog = await CatalogStore.open(join(work.path, 'catalog'));
    scheduler = await startScheduler({ credentials, catalog: catalogRoutes(catalog) });
  });

  after(async () => {
    await scheduler.close();
    await catalog.close();
  });

  it('the scheduler answers 401 without a valid credential and changes nothing', async () => {
    const swarm = `${scheduler.url}/v1/swarms/${hex}`;
    for (const access of [undefined, stranger]) {
      await assert.rejects(
        callJson(`${swarm}/hosts`, 'the scheduler', {
          method: 'POST',
          timeoutMs: 5000,
          access,
          body: { name: 'intruder' },
        }),
        rejectsWith('UNAUTHORIZED'),
      );
    }
    assert.equal(scheduler.swarms.size, 0);
    assert.equal(await status(swarm), 401);
    assert.equal(await status(`${scheduler.url}/healthz`), 200);
    // A registration with the member's token works; deleting it without one does not.
    const registered = (await registerBareHost(swarm, manifest, { name: 'a', access: member })) as {
      host: number;
    };
    assert.equal(scheduler.swarms.get(hex)?.hostCount, 1);
    assert.equal(await status(`${swarm}/hosts/${registered.host}`, { method: 'DELETE' }), 401);
    assert.equal(scheduler.swarms.get(hex)?.hostCount, 1);
    await assert.rejects(
      openChannel(`${swarm}/hosts/${registered.host}/channel`, AbortSignal.timeout(5000)),
      rejectsWith('UNAUTHORIZED'),
    );
    const { socket } = await openChannel(
      `${swarm}/hosts/${registered.host}/channel`,
      AbortSignal.timeout(5000),
      member,
    );
    socket.destroy();
    // The bare host leaves (with the token), so the pulls below are not planned around it.
    await callJson(`${swarm}/hosts/${registered.host}`, 'the scheduler', {
      method: 'DELETE',
      timeoutMs: 5000,
      access: member,
    });
    assert.equal(scheduler.swarms.get(hex)?.hostCount, 0);
  });

  it('the catalog: 401 without a credential, 403 for a member changing it, and nothing changes', async () => {
    assert.equal(await status(`${scheduler.url}/v1/catalog/nodes`), 401);
    const asMember = new CatalogClient(scheduler.url, member);
    const asOperator = new CatalogClient(scheduler.url, operator);
    // A seed node registering itself (new, or again unchanged) is a member's.
    await asMember.registerNode('n1', 'http://127.0.0.1:9/');
    await asMember.registerNode('n1', 'http://127.0.0.1:9/');
    await assert.rejects(
      new CatalogClient(scheduler.url).registerNode('n2', 'http://127.0.0.1:9/'),
      rejectsWith('UNAUTHORIZED'),
    );
    await assert.rejects(asMember.registerNode('n1', 'http://127.0.0.1:10/'), rejectsWith('FORBIDDEN'));
    await assert.rejects(
      asMember.registerNode('n1', 'http://127.0.0.1:9/', { active: false }),
      rejectsWith('FORBIDDEN'),
    );
    await assert.rejects(
      asMember.createModel(
        manifest,
        manifest.files.flatMap((file) => file.pieces.map(() => ['n1'])),
      ),
      rejectsWith('FORBIDDEN'),
    );
    await assert.rejects(
      asMember.commit(hex, [{ piece: 0, expectVersion: 1, holders: ['n1'] }]),
      rejectsWith('FORBIDDEN'),
    );
    assert.deepEqual(await asMember.nodes(), [{ name: 'n1', url: 'http://127.0.0.1:9/', active: true }]);
    assert.deepEqual(await asMember.models(), []);
    // The operator drains the node.
    await asOperator.registerNode('n1', 'http://127.0.0.1:9/', { active: false });
    assert.deepEqual(await asMember.nodes(), [{ name: 'n1', url: 'http://127.0.0.1:9/', active: false }]);
  });

  it('a seed node and the peer API: 401 without a credential, 403 for a member writing, nothing changes', async () => {
    const seed = await SeedNode.open({
      dir: join(work.path, 'seed'),
      catalogUrl: scheduler.url,
      access: member,
    });
    const agent = await Agent.start({
      schedulerUrl: scheduler.url,
      cacheDir: join(work.path, 'seed-agent'),
      credentials,
      access: member,
      seedRoutes: seed.handle,
    });
    try {
      const map = new PieceMap(manifest);
      const where = map.locate(0);
      const file = manifest.files[where.fileIndex];
      assert.ok(file !== undefined);
      const bytes = (await readFile(join(modelDir, file.path))).subarray(
        where.offset,
        where.offset + where.length,
      );
      // A seed node takes only models the catalog has: the operator files the manifest first.
      await new CatalogClient(scheduler.url, operator).announceModel(manifest);
      await new SeedNodeClient('s', agent.url, operator).putManifest(manifest);
      assert.equal(await new SeedNodeClient('s', agent.url, operator).putPiece(hex, 0, bytes), 'stored');

      const asMember = new SeedNodeClient('s', agent.url, member);
      const asNobody = new SeedNodeClient('s', agent.url);
      await assert.rejects(asNobody.held(hex), rejectsWith('UNAUTHORIZED'));
      await assert.rejects(asNobody.deletePiece(hex, 0), rejectsWith('UNAUTHORIZED'));
      await assert.rejects(asMember.deletePiece(hex, 0), rejectsWith('FORBIDDEN'));
      await assert.rejects(asMember.putPiece(hex, 1, bytes), rejectsWith('FORBIDDEN'));
      await assert.rejects(asMember.copyFrom(hex, 1, 'http://127.0.0.1:9/'), rejectsWith('FORBIDDEN'));
      assert.deepEqual(await asMember.held(hex), [0]);
      assert.ok((await asMember.getPiece(hex, 0, bytes.length)).equals(bytes));

      // The peer API over HTTP, and the peer wire's HELLO.
      assert.equal(await status(`${agent.url}/v1/models/${hex}/have`), 401);
      const read = (credential: Uint8Array | undefined): Promise<void> => {
        const client = new PeerWireClient({
          url: agent.url,
          model: hex,
          idleTimeoutMs: 5000,
          ...(credential === undefined ? {} : { credential }),
        });
        return client.read(0, 0, Buffer.alloc(16)).finally(() => client.close());
      };
      await assert.rejects(read(undefined), rejectsWith('UNAUTHORIZED'));
      await assert.rejects(read(Buffer.from(stranger.token ?? '')), rejectsWith('UNAUTHORIZED'));
      // With the token the HELLO passes, and the agent says it has not joined the model.
      await assert.rejects(read(Buffer.from(CLUSTER)), (error) =>
        isWeightcastError(error, 'SWARM_UNKNOWN_MODEL'),
      );
      // The local API needs no token: this machine's users reach it (it has not joined the model).
      assert.equal(
        await status(`${agent.url}/v1/local/models/${hex}`),
        errorEntry('SWARM_UNKNOWN_MODEL').status,
      );
    } finally {
      await agent.close();
    }
  });

  it('a whole swarm pull with tokens: the pull reads the model from a peer', async () => {
    const seeder = await Agent.start({
      schedulerUrl: scheduler.url,
      cacheDir: join(work.path, 'seeder'),
      credentials,
      access: member,
    });
    try {
      await seeder.join({ source: modelDir, manifest });
      await seeder.whenComplete(hex);
      const dest = join(work.path, 'pulled');
      const result = await swarmPull(modelDir, dest, {
        manifest,
        schedulerUrl: scheduler.url,
        credentials,
        access: member,
        signal: AbortSignal.timeout(30_000),
      });
      assert.ok(result.peerBytes > 0, `peer bytes ${result.peerBytes}`);
      assert.ok(
        await sameFiles(
          dest,
          modelDir,
          manifest.files.map((entry) => entry.path),
        ),
      );
    } finally {
      await seeder.close();
    }
  });

  it('a pull with a wrong token stops with UNAUTHORIZED instead of going around the swarm', async () => {
    await assert.rejects(
      swarmPull(modelDir, join(work.path, 'refused'), {
        manifest,
        schedulerUrl: scheduler.url,
        access: stranger,
        signal: AbortSignal.timeout(30_000),
      }),
      rejectsWith('UNAUTHORIZED'),
    );
  });
});

describe('secure by default', { timeout: 30_000 }, () => {
  it('a service on a non-loopback address without a credential does not start unless --insecure', async () => {
    await assert.rejects(
      startScheduler({ host: '0.0.0.0' }),
      (error) => isWeightcastError(error, 'USAGE') && /--cluster-token-file/.test(error.message),
    );
    await assert.rejects(
      Agent.start({
        schedulerUrl: 'http://127.0.0.1:9',
        cacheDir: join(work.path, 'open-agent'),
        host: '0.0.0.0',
      }),
      (error) => isWeightcastError(error, 'USAGE') && /--insecure/.test(error.message),
    );
    const io = memoryIo();
    const code = await runCli(['scheduler', '--host', '0.0.0.0', '--port', '0'], io);
    assert.equal(code, 2);
    assert.match(io.err.join(''), /--cluster-token-file/);
    const open = await startScheduler({ host: '0.0.0.0', insecure: true });
    await open.close();
    const withToken = await startScheduler({ host: '0.0.0.0', credentials: { clusterToken: CLUSTER } });
    await withToken.close();
  });
});
