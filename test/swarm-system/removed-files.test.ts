/**
 * A model whose files the user deletes under a running agent (the destination folder the agent
 * wrote it into, or its copy in the cache) is forgotten: the agent closes the files (they would keep
 * the disk space), removes the model's state (a restart would fetch it into that folder again),
 * says so, and a later pull fetches it anew instead of being told it is complete.
 */

import assert from 'node:assert/strict';
import { readdir, readlink, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { type Manifest } from '../../src/manifest/manifest.js';
import { startFileServer, type FileServer } from '../../src/origin/file-server.js';
import { Agent, type AgentEvent } from '../../src/swarm/agent/agent.js';
import { startScheduler, type SchedulerServer } from '../../src/swarm/scheduler/scheduler-server.js';
import { sameFiles, tempDir, smallModelWithManifest } from '../helpers/fixtures.js';

let work: { path: string; cleanup: () => Promise<void> };
let modelDir: string;
let manifest: Manifest;
let hex: string;
let paths: string[];
let origin: FileServer;
let scheduler: SchedulerServer;

before(async () => {
  work = await tempDir('removed-files');
  ({ modelDir, manifest, hex, paths } = await smallModelWithManifest(work.path));
  origin = await startFileServer({ root: modelDir });
  scheduler = await startScheduler();
});

after(async () => {
  await origin.close();
  await scheduler.close();
  await work.cleanup();
});

/** Files this process holds open that no name links to any more, under `dir`. */
async function deletedButOpen(dir: string): Promise<string[]> {
  const links = await Promise.all(
    (await readdir('/proc/self/fd')).map((fd) => readlink(`/proc/self/fd/${fd}`).catch(() => '')),
  );
  return links.filter((link) => link.startsWith(dir) && link.endsWith('(deleted)'));
}

async function until(check: () => boolean, ms: number): Promise<boolean> {
  for (const deadline = performance.now() + ms; performance.now() < deadline && !check();)
    await new Promise((resolve) => setTimeout(resolve, 25));
  return check();
}

describe('files deleted under a running agent', { timeout: 60_000 }, () => {
  it('a destination folder removed by its user: forgotten, files closed, fetched anew when asked', async () => {
    const events: AgentEvent[] = [];
    const cacheDir = join(work.path, 'cache-destination');
    const agent = await Agent.start({
      schedulerUrl: scheduler.url,
      cacheDir,
      destinationRoots: [work.path],
      removedCheckMs: 100,
      onEvent: (event) => events.push(event),
    });
    try {
      const dest = join(work.path, 'dest');
      await agent.join({ source: origin.url, manifest, to: dest });
      await agent.whenComplete(hex);
      assert.equal(agent.status(hex).filesAt, 'destination');
      await rm(dest, { recursive: true });
      // The agent notices by itself: the model is dropped, its files closed, its state gone.
      const removed = (): AgentEvent | undefined => events.find((event) => event.type === 'removed');
      assert.ok(await until(() => removed() !== undefined, 5000), JSON.stringify(events));
      assert.match((removed() as { path: string }).path, /dest/);
      assert.throws(() => agent.status(hex), { code: 'SWARM_UNKNOWN_MODEL' });
      assert.deepEqual(await deletedButOpen(dest), []);
      assert.deepEqual(await readdir(join(cacheDir, hex)).catch(() => 'gone'), 'gone');
      // Asked again, the agent fetches it anew into the folder.
      await agent.join({ source: origin.url, manifest, to: dest });
      await agent.whenComplete(hex);
      assert.ok(await sameFiles(modelDir, dest, paths));
    } finally {
      await agent.close();
    }
  });

  it("the cache's copy removed: a join finds it gone and fetches it anew, not 'complete'", async () => {
    const events: AgentEvent[] = [];
    const cacheDir = join(work.path, 'cache-own');
    const agent = await Agent.start({
      schedulerUrl: scheduler.url,
      cacheDir,
      onEvent: (event) => events.push(event),
    });
    try {
      await agent.join({ source: origin.url, manifest });
      await agent.whenComplete(hex);
      const files = agent.status(hex).filesDir as string;
      await rm(files, { recursive: true });
      // Before the agent's own look (10 s by default), a join looks first.
      const status = await agent.join({ source: origin.url, manifest });
      assert.ok(events.some((event) => event.type === 'removed'));
      assert.equal(status.held < status.pieceCount, true);
      await agent.whenComplete(hex);
      assert.ok(await sameFiles(modelDir, files, paths));
    } finally {
      await agent.close();
    }
  });
});
