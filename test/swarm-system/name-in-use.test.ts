/**
 * A registration cannot take over a live host (issue 16): against a real scheduler, a second
 * registration of a live host's name from another address gets 409 SWARM_NAME_IN_USE and changes
 * nothing, and a member whose name is taken stops its model with that code instead of retrying.
 */

import assert from 'node:assert/strict';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { isWeightcastError } from '../../src/errors.js';
import { buildManifest } from '../../src/manifest/build.js';
import { encodeManifest, manifestDigest } from '../../src/manifest/manifest.js';
import { LocalOrigin } from '../../src/origin/local.js';
import { PieceMap } from '../../src/piece/piece-map.js';
import { PieceStore } from '../../src/piece/store.js';
import { SwarmMember, type MemberEvent } from '../../src/swarm/agent/member.js';
import { startScheduler } from '../../src/swarm/scheduler/scheduler-server.js';
import { callJson } from '../../src/swarm/wire/http-json.js';
import { Throttle } from '../../src/util/throttle.js';
import { tempDir, writeSmallModel } from '../helpers/fixtures.js';
import { registerBareHost } from '../helpers/swarm.js';

describe('a live host name', { timeout: 30_000 }, () => {
  it('cannot be taken over from another address; a member whose name is taken stops', async () => {
    const scheduler = await startScheduler();
    const dir = await tempDir('name-in-use');
    const modelDir = join(dir.path, 'model');
    await writeSmallModel(modelDir);
    const origin = new LocalOrigin(modelDir);
    const manifest = await buildManifest(origin, { pieceSize: 64 * 1024 });
    const hex = manifestDigest(manifest).slice('sha256:'.length);
    const swarm = `${scheduler.url}/v1/swarms/${hex}`;
    const map = new PieceMap(manifest);
    const store = await PieceStore.open(map, {
      dataDir: join(dir.path, 'partial'),
      stateDir: join(dir.path, 'state'),
    });
    const events: MemberEvent[] = [];
    let member: SwarmMember | undefined;
    try {
      const live = (await registerBareHost(swarm, manifest, {
        name: 'h1',
        url: 'http://127.0.0.1:9/',
      })) as { host: number };
      await assert.rejects(
        registerBareHost(swarm, manifest, { name: 'h1', url: 'http://127.0.0.2:9/' }),
        (error: unknown) => isWeightcastError(error, 'SWARM_NAME_IN_USE'),
      );
      const status = (await callJson(swarm, 'the scheduler', { timeoutMs: 5000 })) as {
        hosts: Array<{ host: number; url: string }>;
      };
      assert.deepEqual(
        status.hosts.map((h) => [h.host, h.url]),
        [[live.host, 'http://127.0.0.1:9/']],
      );
      member = new SwarmMember({
        model: hex,
        map,
        manifestBytes: encodeManifest(manifest),
        store,
        origin,
        schedulerUrl: scheduler.url,
        identity: {
          name: 'h1',
          url: 'http://127.0.0.3:9/',
          uploadBytesPerSecond: 1e8,
          downloadBytesPerSecond: 1e8,
        },
        downloadThrottle: new Throttle(undefined),
        onEvent: (event) => {
          if (event.type !== 'piece') events.push(event);
        },
      });
      member.start();
      await assert.rejects(member.complete, (error: unknown) =>
        isWeightcastError(error, 'SWARM_NAME_IN_USE'),
      );
      assert.equal(member.failure?.code, 'SWARM_NAME_IN_USE');
      assert.ok(events.some((event) => event.type === 'failed' && event.code === 'SWARM_NAME_IN_USE'));
    } finally {
      await member?.close();
      await store.close();
      await origin.close();
      await scheduler.close();
      await dir.cleanup();
    }
  });
});
