/**
 * A join that fails after its member began registering (the agent cannot write the destination,
 * found while the store opens) leaves no host at the scheduler. Before, a registration still in
 * flight when the member closed was abandoned: the scheduler kept a host that never fetched, holding
 * the origin reads it was given until its host timeout (10 s), and a new agent of the model waited.
 */

import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { type Manifest } from '../../src/manifest/manifest.js';
import { startFileServer, type FileServer } from '../../src/origin/file-server.js';
import { Agent } from '../../src/swarm/agent/agent.js';
import { startScheduler, type SchedulerServer } from '../../src/swarm/scheduler/scheduler-server.js';
import { tempDir, smallModelWithManifest } from '../helpers/fixtures.js';

let work: { path: string; cleanup: () => Promise<void> };
let manifest: Manifest;
let hex: string;
let origin: FileServer;
let scheduler: SchedulerServer;

before(async () => {
  work = await tempDir('failed-join');
  const fixture = await smallModelWithManifest(work.path);
  const { modelDir } = fixture;
  ({ manifest, hex } = fixture);
  origin = await startFileServer({ root: modelDir });
  scheduler = await startScheduler();
});

after(async () => {
  await origin.close();
  await scheduler.close();
  await work.cleanup();
});

describe('a join refused while its member registers', { timeout: 30_000 }, () => {
  it('leaves no host behind at the scheduler (20 tries: the race is not won every time)', async () => {
    for (let round = 0; round < 20; round++) {
      const agent = await Agent.start({
        schedulerUrl: scheduler.url,
        cacheDir: join(work.path, `cache-${round}`),
        destinationRoots: [work.path],
      });
      try {
        // A destination under a regular file cannot be made: the store's opening fails at once.
        await assert.rejects(
          agent.join({ source: origin.url, manifest, to: join(work.path, 'origin', 'config.json', 'x') }),
          { code: 'IO' },
        );
      } finally {
        await agent.close();
      }
      // The member has closed: its host, if it got one, has left (well before the 10 s timeout).
      const hosts = (): number => scheduler.swarms.get(hex)?.status().hosts.length ?? 0;
      for (let waits = 0; waits < 40 && hosts() > 0; waits++)
        await new Promise((resolve) => setTimeout(resolve, 50));
      assert.equal(
        hosts(),
        0,
        `round ${round}: ${JSON.stringify(scheduler.swarms.get(hex)?.status().hosts)}`,
      );
    }
  });
});
