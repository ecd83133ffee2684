/**
 * An agent opens its connection to the scheduler at start, while the links are quiet, and its first
 * registration goes over it: the scheduler often shares a busy link with the origin, where the
 * handshake of a new connection would queue behind the model's bytes. A real scheduler behind a TCP
 * relay that records which connection carried which request.
 */

import assert from 'node:assert/strict';
import { createServer, connect, type AddressInfo, type Server } from 'node:net';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { startFileServer, type FileServer } from '../../src/origin/file-server.js';
import { Agent } from '../../src/swarm/agent/agent.js';
import { startScheduler, type SchedulerServer } from '../../src/swarm/scheduler/scheduler-server.js';
import type { Manifest } from '../../src/manifest/manifest.js';
import { smallModelWithManifest, tempDir } from '../helpers/fixtures.js';

let work: { path: string; cleanup: () => Promise<void> };
let manifest: Manifest;
let origin: FileServer;
let scheduler: SchedulerServer;

before(async () => {
  work = await tempDir('scheduler-preconnect');
  const fixture = await smallModelWithManifest(work.path);
  manifest = fixture.manifest;
  origin = await startFileServer({ root: fixture.modelDir });
  scheduler = await startScheduler();
});

after(async () => {
  await origin.close();
  await scheduler.close();
  await work.cleanup();
});

/**
 * Relays connections to `target`, noting the request lines each connection carried, in order, and
 * (as `< STATUS`) the status lines of the answers that came back on it.
 */
async function recordingRelay(
  target: string,
): Promise<{ url: string; requests: string[][]; server: Server }> {
  const { hostname, port } = new URL(target);
  const requests: string[][] = [];
  const server = createServer((client) => {
    const seen: string[] = [];
    requests.push(seen);
    const upstream = connect(Number(port), hostname);
    client.on('data', (chunk: Buffer) => {
      for (const match of chunk.toString('latin1').matchAll(/^(GET|POST|PUT|DELETE) (\S+) HTTP\/1\.1\r$/gm))
        seen.push(`${match[1]} ${match[2]}`);
    });
    upstream.on('data', (chunk: Buffer) => {
      for (const match of chunk.toString('latin1').matchAll(/^HTTP\/1\.1 (\d{3}) /gm))
        seen.push(`< ${match[1]}`);
    });
    client.pipe(upstream).pipe(client);
    client.on('error', () => upstream.destroy());
    upstream.on('error', () => client.destroy());
  });
  server.listen(0, '127.0.0.1');
  await new Promise((resolve) => server.once('listening', resolve));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, requests, server };
}

describe('an agent and its scheduler', { timeout: 30_000 }, () => {
  it('connects at start; the first registration goes over that connection', async () => {
    const relay = await recordingRelay(scheduler.url);
    const agent = await Agent.start({ schedulerUrl: relay.url, cacheDir: join(work.path, 'cache') });
    try {
      // The warm-up's answer back (its connection then waits in the pool), before the join.
      for (let wait = 0; wait < 500 && !relay.requests.flat().includes('< 200'); wait++) await sleep(10);
      await sleep(50);
      assert.deepEqual(relay.requests, [['GET /healthz', '< 200']], 'one connection, opened at start');
      await agent.join({ source: origin.url, manifest });
      const requests = (): string[][] =>
        relay.requests.map((lines) => lines.filter((line) => !line.startsWith('<')));
      const registered = (): boolean =>
        requests()
          .flat()
          .some((line) => /^POST \/v1\/swarms\/\w+\/hosts$/.test(line));
      for (let wait = 0; wait < 500 && !registered(); wait++) await sleep(10);
      const first = requests()[0] ?? [];
      assert.equal(first[0], 'GET /healthz');
      assert.match(first[1] ?? '', /^POST \/v1\/swarms\/\w+\/hosts$/, JSON.stringify(relay.requests));
    } finally {
      await agent.close();
      relay.server.close();
    }
  });
});
