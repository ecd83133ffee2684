/**
 * The user's flow on a host with an agent: `weightcast pull SRC --to DIR --manifest M` finds the
 * agent by itself, the agent writes the model straight into DIR (no second copy, no second hash),
 * and the pull says how the files got there. Real processes for the pulls; the agent, scheduler
 * and origin in this process, on 127.0.0.1.
 */

import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { createServer } from 'node:http';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, open, readdir, readFile, rm, stat, symlink, writeFile } from 'node:fs/promises';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import { type Manifest } from '../../src/manifest/manifest.js';
import { startFileServer, type FileServer } from '../../src/origin/file-server.js';
import { Agent } from '../../src/swarm/agent/agent.js';
import { agentPull } from '../../src/swarm/agent-pull.js';
import { findLocalAgent } from '../../src/swarm/local-agent.js';
import { startScheduler, type SchedulerServer } from '../../src/swarm/scheduler/scheduler-server.js';
import { CLI } from '../../scripts/cluster.js';
import { freePort, sameFiles, tempDir, smallModelWithManifest } from '../helpers/fixtures.js';

const run = promisify(execFile);

let work: { path: string; cleanup: () => Promise<void> };
let modelDir: string;
let manifest: Manifest;
let manifestPath: string;
let hex: string;
let paths: string[];
let origin: FileServer;
let scheduler: SchedulerServer;

before(async () => {
  work = await tempDir('user-flow');
  ({ modelDir, manifest, manifestPath, hex, paths } = await smallModelWithManifest(work.path));
  origin = await startFileServer({ root: modelDir });
  scheduler = await startScheduler();
});

after(async () => {
  await origin.close();
  await scheduler.close();
  await work.cleanup();
});

async function withAgent(
  name: string,
  body: (agent: Agent) => Promise<void>,
  options: { downloadBytesPerSecond?: number; schedulerUrl?: string } = {},
): Promise<void> {
  const { downloadBytesPerSecond } = options;
  const agent = await Agent.start({
    schedulerUrl: options.schedulerUrl ?? scheduler.url,
    cacheDir: join(work.path, name),
    destinationRoots: [work.path],
    ...(downloadBytesPerSecond === undefined ? {} : { downloadBytesPerSecond }),
  });
  try {
    await body(agent);
  } finally {
    await agent.close();
  }
}

async function pullCli(
  args: string[],
  env: NodeJS.ProcessEnv,
): Promise<{ stdout: string; stderr: string; last: Record<string, unknown> }> {
  const { stdout, stderr } = await run(process.execPath, [CLI, 'pull', ...args, '--json'], {
    env: { ...process.env, ...env },
    timeout: 60_000,
  });
  const last = JSON.parse(stdout.trim().split('\n').pop() ?? '{}') as Record<string, unknown>;
  return { stdout, stderr, last };
}

/** The CLI's pull as a user runs it (text output): its exit code and output, whatever the outcome. */
async function pullText(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return runCli(['pull', ...args]);
}

async function runCli(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const { stdout, stderr } = await run(process.execPath, [CLI, ...args], {
      env: { ...process.env, WEIGHTCAST_AGENT: 'off' },
      timeout: 60_000,
    });
    return { code: 0, stdout, stderr };
  } catch (error) {
    const failed = error as { code?: unknown; stdout?: string; stderr?: string };
    // Killed at the timeout (no exit code): that is the test's failure, not an outcome.
    if (typeof failed.code !== 'number') throw error;
    return { code: failed.code, stdout: failed.stdout ?? '', stderr: failed.stderr ?? '' };
  }
}

/** Overwrites four bytes of a file in place, as a user's edit or a disk fault would. */
async function damage(path: string, offset: number): Promise<void> {
  const handle = await open(path, 'r+');
  try {
    await handle.write(Buffer.from([0, 1, 2, 3]), 0, 4, offset);
  } finally {
    await handle.close();
  }
}

describe('finding the local agent', () => {
  it('takes $WEIGHTCAST_AGENT, honours off, and rejects what is not a URL', async () => {
    assert.deepEqual(await findLocalAgent({ WEIGHTCAST_AGENT: 'http://127.0.0.1:7999/' }), {
      found: true,
      url: 'http://127.0.0.1:7999',
      via: 'env',
    });
    assert.deepEqual(await findLocalAgent({ WEIGHTCAST_AGENT: 'off' }), { found: false, reason: 'disabled' });
    await assert.rejects(findLocalAgent({ WEIGHTCAST_AGENT: 'agent:7100' }), { code: 'USAGE' });
  });

  it('probes: an agent answers, a closed port and a server that is not an agent do not', async () => {
    await withAgent('probe', async (agent) => {
      assert.deepEqual(await findLocalAgent({}, undefined, agent.url), {
        found: true,
        url: agent.url,
        via: 'probe',
      });
    });
    const closed = createServer();
    await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
    const closedUrl = `http://127.0.0.1:${(closed.address() as AddressInfo).port}`;
    await new Promise<void>((resolve) => closed.close(() => resolve()));
    assert.deepEqual(await findLocalAgent({}, undefined, closedUrl), {
      found: false,
      reason: 'none-listening',
    });
    // The scheduler answers /healthz too, but not as an agent.
    assert.deepEqual(await findLocalAgent({}, undefined, scheduler.url), {
      found: false,
      reason: 'none-listening',
    });
  });

  it('probes: a server answering with a large page, or a byte at a time, is no agent, and the probe ends', async () => {
    const large = createServer((_req, res) => res.end('x'.repeat(1 << 20)));
    const trickling = createServer((_req, res) => {
      res.writeHead(200);
      const timer = setInterval(() => res.write(' '), 100);
      res.on('close', () => clearInterval(timer));
    });
    for (const server of [large, trickling]) {
      await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
      const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
      // Not a timing check: only a bound well past the probe's own deadline, so a hang fails here.
      const hang = new AbortController();
      const found = await Promise.race([
        findLocalAgent({}, undefined, url),
        sleep(10_000, 'still probing', { signal: hang.signal }).catch(() => 'aborted'),
      ]).finally(() => hang.abort());
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      assert.deepEqual(found, { found: false, reason: 'none-listening' });
    }
  });
});

describe('pull through the agent of this host', { timeout: 120_000 }, () => {
  it('has the agent write the model straight into the destination, once', async () => {
    await withAgent('direct', async (agent) => {
      const dest = join(work.path, 'dest-direct');
      const { last, stderr } = await pullCli([origin.url, '--to', dest, '--manifest', manifestPath], {
        WEIGHTCAST_AGENT: agent.url,
      });
      assert.equal(last['event'], 'done');
      assert.equal(last['placed'], 'direct');
      assert.ok(await sameFiles(modelDir, dest, paths));
      // Only the model: the partial files' folders are gone.
      assert.deepEqual(
        (await readdir(dest)).sort(),
        [...new Set(paths.map((path) => path.split('/')[0]!))].sort(),
      );
      const status = agent.status(hex);
      assert.equal(status.filesDir, dest);
      assert.equal(status.filesAt, 'destination');
      // The agent's cache holds the state, not a second copy of the files.
      assert.equal(await stat(join(work.path, 'direct', hex, 'files')).catch(() => undefined), undefined);
      assert.ok(!stderr.includes('copying'), stderr);

      // The same pull again is done at once; into a second directory, the bytes are read and verified.
      assert.equal(
        (
          await pullCli([origin.url, '--to', dest, '--manifest', manifestPath], {
            WEIGHTCAST_AGENT: agent.url,
          })
        ).last['placed'],
        'direct',
      );
      const second = join(work.path, 'dest-second');
      const again = await pullCli([origin.url, '--to', second, '--manifest', manifestPath], {
        WEIGHTCAST_AGENT: agent.url,
      });
      assert.equal(again.last['placed'], 'verified-copy');
      assert.ok(await sameFiles(modelDir, second, paths));
    });
  });

  it("places a model from the agent's cache without reading it, and links it on request", async () => {
    await withAgent('cached', async (agent) => {
      await agent.join({ source: origin.url, manifest });
      await agent.whenComplete(hex);
      assert.equal(agent.status(hex).filesAt, 'cache');
      const copied = join(work.path, 'dest-copied');
      const linked = join(work.path, 'dest-linked');
      const env = { WEIGHTCAST_AGENT: agent.url };
      const first = await pullCli([origin.url, '--to', copied, '--manifest', manifestPath], env);
      assert.ok(
        first.last['placed'] === 'copy' || first.last['placed'] === 'reflink',
        String(first.last['placed']),
      );
      const second = await pullCli([origin.url, '--to', linked, '--manifest', manifestPath, '--link'], env);
      assert.equal(second.last['placed'], 'link');
      const cached = join(work.path, 'cached', hex, 'files');
      for (const dir of [copied, linked]) assert.ok(await sameFiles(modelDir, dir, paths));
      const shard = paths.find((path) => path.endsWith('.safetensors'))!;
      assert.equal((await stat(join(linked, shard))).ino, (await stat(join(cached, shard))).ino);
      assert.notEqual((await stat(join(copied, shard))).ino, (await stat(join(cached, shard))).ino);
    });
  });

  it("places a model from the agent's cache onto another file system by copying, even with --link", async (t) => {
    const other = existsSync('/dev/shm') ? await mkdtemp('/dev/shm/weightcast-user-flow-') : undefined;
    try {
      if (other === undefined || (await stat(other)).dev === (await stat(work.path)).dev) {
        t.skip('no /dev/shm on another file system than the temporary directory here');
        return;
      }
      await withAgent('cached-elsewhere', async (agent) => {
        await agent.join({ source: origin.url, manifest });
        await agent.whenComplete(hex);
        const dest = join(other, 'model');
        const { last } = await pullCli([origin.url, '--to', dest, '--manifest', manifestPath, '--link'], {
          WEIGHTCAST_AGENT: agent.url,
        });
        assert.ok(last['placed'] === 'copy' || last['placed'] === 'reflink', String(last['placed']));
        assert.ok(await sameFiles(modelDir, dest, paths));
        // The model's files, and none of the placement's scaffolding.
        assert.deepEqual(
          (await readdir(dest)).sort(),
          [...new Set(paths.map((path) => path.split('/')[0]!))].sort(),
        );
      });
    } finally {
      if (other !== undefined) await rm(other, { recursive: true, force: true });
    }
  });

  it('waits for an agent that is still starting', async () => {
    const probe = createServer();
    await new Promise<void>((resolve) => probe.listen(0, '127.0.0.1', resolve));
    const port = (probe.address() as AddressInfo).port;
    await new Promise<void>((resolve) => probe.close(() => resolve()));
    const dest = join(work.path, 'dest-late');
    const pulling = pullCli(
      [origin.url, '--to', dest, '--manifest', manifestPath, '--agent', `http://127.0.0.1:${port}`],
      {},
    );
    await sleep(700);
    const agent = await Agent.start({
      schedulerUrl: scheduler.url,
      cacheDir: join(work.path, 'late'),
      port,
      destinationRoots: [work.path],
    });
    try {
      const { last } = await pulling;
      assert.equal(last['placed'], 'direct');
      assert.ok(await sameFiles(modelDir, dest, paths));
    } finally {
      await agent.close();
    }
  });

  it('says it waits for an agent that does not answer yet, and joins it once it listens', async () => {
    const port = await freePort();
    const dest = join(work.path, 'dest-told');
    let agent: Agent | undefined;
    let starting: Promise<Agent> | undefined;
    const told: number[] = [];
    try {
      const { status } = await agentPull(origin.url, dest, {
        manifestBytes: await readFile(manifestPath),
        manifestName: manifestPath,
        agentUrl: `http://127.0.0.1:${port}`,
        // The agent starts only once the pull has said it waits: the notice cannot race the agent.
        onWaitingForAgent: (waitMs) => {
          told.push(waitMs);
          starting = Agent.start({
            schedulerUrl: scheduler.url,
            cacheDir: join(work.path, 'told'),
            port,
            destinationRoots: [work.path],
          });
        },
      });
      agent = await starting;
      assert.deepEqual(told, [10_000], 'told once, with the whole wait');
      assert.equal(status.complete, true);
      assert.ok(await sameFiles(modelDir, dest, paths));
    } finally {
      await (agent ?? (await starting?.catch(() => undefined)))?.close();
    }
  });

  it('writes only under its destination roots; elsewhere the pull places the files from the cache', async () => {
    const outside = await tempDir('user-flow-outside');
    const agent = await Agent.start({
      schedulerUrl: scheduler.url,
      cacheDir: join(work.path, 'rooted'),
      destinationRoots: [join(work.path, 'models')],
    });
    try {
      // Outside the roots (here through a symbolic link from inside them): refused, typed.
      await mkdir(join(work.path, 'models'), { recursive: true });
      await symlink(outside.path, join(work.path, 'models', 'escape'));
      await assert.rejects(
        agent.join({ source: origin.url, manifest, to: join(work.path, 'models', 'escape', 'm') }),
        { code: 'FORBIDDEN' },
      );
      const dest = join(outside.path, 'placed');
      const { last, stderr } = await pullCli([origin.url, '--to', dest, '--manifest', manifestPath], {
        WEIGHTCAST_AGENT: agent.url,
      });
      assert.ok(last['placed'] === 'copy' || last['placed'] === 'reflink', String(last['placed']));
      assert.match(stderr, /cannot write into/);
      assert.ok(await sameFiles(modelDir, dest, paths));
      assert.equal(agent.status(hex).filesAt, 'cache');
    } finally {
      await agent.close();
      await outside.cleanup();
    }
  });

  it('pulls from the origin itself with WEIGHTCAST_AGENT=off or --no-agent, and without a manifest', async () => {
    await withAgent('skipped', async (agent) => {
      const off = await pullCli(
        [origin.url, '--to', join(work.path, 'dest-off'), '--manifest', manifestPath],
        { WEIGHTCAST_AGENT: 'off' },
      );
      assert.equal(off.last['placed'], undefined);
      assert.equal(
        off.last['piecesFetched'],
        manifest.files.reduce((sum, file) => sum + file.pieces.length, 0),
      );
      const flag = await pullCli(
        [origin.url, '--to', join(work.path, 'dest-flag'), '--manifest', manifestPath, '--no-agent'],
        { WEIGHTCAST_AGENT: agent.url },
      );
      assert.equal(flag.last['placed'], undefined);
      const bare = await pullCli([origin.url, '--to', join(work.path, 'dest-bare')], {
        WEIGHTCAST_AGENT: agent.url,
      });
      assert.equal(bare.last['verified'], false);
      assert.match(bare.stderr, /needs --manifest/);
      assert.throws(() => agent.status(hex), { code: 'SWARM_UNKNOWN_MODEL' });
    });
  });

  it('resumes into the destination after a restart, and refuses a destination it cannot write with IO', async () => {
    const dest = join(work.path, 'dest-resumed');
    await withAgent(
      'resumed',
      async (agent) => {
        await agent.join({ source: origin.url, manifest, to: dest });
        for (let tries = 0; tries < 200 && agent.status(hex).held < 4; tries++) await sleep(20);
        assert.ok(
          agent.status(hex).held >= 4 && !agent.status(hex).complete,
          'the throttled agent should be part way',
        );
      },
      { downloadBytesPerSecond: 256 * 1024 },
    );
    const job = JSON.parse(await readFile(join(work.path, 'resumed', hex, 'job.json'), 'utf8')) as {
      to?: string;
    };
    assert.equal(job.to, dest);
    await withAgent('resumed', async (agent) => {
      await agent.whenComplete(hex);
      assert.equal(agent.status(hex).filesDir, dest);
      assert.ok(await sameFiles(modelDir, dest, paths));
    });
    // A destination under a regular file cannot be made, whoever runs the agent.
    await withAgent('refused', async (agent) => {
      await assert.rejects(agent.join({ source: origin.url, manifest, to: join(dest, 'config.json', 'x') }), {
        code: 'IO',
      });
    });
  });
});

describe('pull through the agent when a copy or the manifest is wrong', { timeout: 120_000 }, () => {
  const shard = (): string => paths.find((path) => path.endsWith('.safetensors'))!;
  // A scheduler of their own, so that nothing the tests above leave at the shared one (a refused
  // join's host, which failed-join.test.ts shows is now undone) can hold these up.
  let own: SchedulerServer;
  before(async () => {
    own = await startScheduler();
  });
  after(() => own.close());

  it("says the files placed from the agent's cache were not hashed again (verify finds a damaged cache)", async () => {
    await withAgent(
      'cache-damaged',
      async (agent) => {
        await agent.join({ source: origin.url, manifest });
        await agent.whenComplete(hex);
        // A byte of the cache changed behind the agent's back (a user as the agent's user, the disk).
        await damage(join(work.path, 'cache-damaged', hex, 'files', shard()), 70_000);
        const dest = join(work.path, 'dest-from-damaged-cache');
        const pulled = await pullText([
          origin.url,
          '--to',
          dest,
          '--manifest',
          manifestPath,
          '--agent',
          agent.url,
        ]);
        assert.equal(pulled.code, 0, pulled.stderr);
        // The placement read no byte, so the output claims only what the agent checked.
        assert.doesNotMatch(pulled.stdout, /every piece verified against the manifest/);
        assert.match(pulled.stdout, /the agent verified every piece against the manifest as it fetched it/);
        assert.match(pulled.stdout, /not hashed again: weightcast verify .* checks them/);
        const verified = await runCli(['verify', dest, '--manifest', manifestPath]);
        assert.equal(verified.code, 1, verified.stdout);
        assert.match(verified.stdout, /corrupt +model-00001-of-00002\.safetensors +1 bad piece: 1/);
      },
      { schedulerUrl: own.url },
    );
  });

  it("fetches what a changed copy at another pull's destination gets wrong from the origin, and says so", async () => {
    await withAgent(
      'changed-copy',
      async (agent) => {
        const first = join(work.path, 'dest-changed');
        await pullCli([origin.url, '--to', first, '--manifest', manifestPath], {
          WEIGHTCAST_AGENT: agent.url,
        });
        assert.equal(agent.status(hex).filesDir, first);
        // The user changes a byte of the model the agent wrote into their directory.
        await damage(join(first, shard()), 70_000);
        const second = join(work.path, 'dest-after-change');
        const sentBefore = origin.stats.bytesSent;
        const args = [origin.url, '--to', second, '--manifest', manifestPath, '--agent', agent.url];
        const pulled = await pullText(args);
        assert.equal(pulled.code, 0, pulled.stderr);
        assert.match(
          pulled.stderr,
          new RegExp(
            `the agent's copy at ${first} has changed since the agent verified it .*from the origin`,
          ),
        );
        assert.equal(pulled.stderr.match(/has changed/g)?.length, 1, pulled.stderr);
        assert.match(pulled.stdout, /verified again; 1 piece that changed there from the origin/);
        assert.ok(await sameFiles(modelDir, second, paths));
        // Only that piece came from the origin; the rest was copied, verified, from the agent's copy.
        assert.equal(origin.stats.bytesSent - sentBefore, manifest.pieceSize);
      },
      { schedulerUrl: own.url },
    );
  });

  it('names the manifest file of a manifest that is not valid, with exit 2, as without an agent', async () => {
    await withAgent(
      'bad-manifest',
      async (agent) => {
        const empty = join(work.path, 'empty.json');
        await writeFile(empty, '');
        const wrongFormat = join(work.path, 'wrong-format.json');
        await writeFile(
          wrongFormat,
          JSON.stringify({ format: 'x', version: 1, pieceSize: 65536, files: [] }),
        );
        for (const [file, problem] of [
          [empty, 'not valid JSON'],
          [wrongFormat, 'not a weightcast manifest at format'],
        ] as const) {
          const dest = join(work.path, 'dest-bad-manifest');
          const args = [origin.url, '--to', dest, '--manifest', file];
          const through = await pullText([...args, '--agent', agent.url]);
          const without = await pullText([...args, '--no-agent']);
          for (const pulled of [through, without]) {
            assert.equal(pulled.code, 2, pulled.stderr);
            assert.ok(
              pulled.stderr.startsWith(`weightcast: MANIFEST_INVALID: ${file}: ${problem}`),
              pulled.stderr,
            );
          }
          assert.equal(through.stderr, without.stderr);
          assert.equal(existsSync(dest), false);
        }
      },
      { schedulerUrl: own.url },
    );
  });
});

describe('a model that stopped for good', () => {
  it('is not resumed when the agent restarts (no origin request), and a join takes it up again', async () => {
    // An origin that answers 404 to everything, counting what it is asked.
    let asked = 0;
    const gone = createServer((_req, res) => {
      asked++;
      res.writeHead(404, { 'content-length': '0' }).end();
    });
    await new Promise<void>((resolve) => gone.listen(0, '127.0.0.1', resolve));
    const goneUrl = `http://127.0.0.1:${(gone.address() as AddressInfo).port}/`;
    const cacheDir = join(work.path, 'stopped-for-good');
    try {
      const first = await Agent.start({ schedulerUrl: scheduler.url, cacheDir });
      try {
        await first.join({ source: goneUrl, manifest });
        await assert.rejects(first.whenComplete(hex), { code: 'ORIGIN_NOT_FOUND' });
      } finally {
        await first.close();
      }
      assert.ok(asked > 0);
      const job = JSON.parse(await readFile(join(cacheDir, hex, 'job.json'), 'utf8')) as {
        stopped?: { code: string };
      };
      assert.equal(job.stopped?.code, 'ORIGIN_NOT_FOUND');

      const askedBefore = asked;
      const events: Array<{ type: string; code?: string }> = [];
      const second = await Agent.start({
        schedulerUrl: scheduler.url,
        cacheDir,
        onEvent: (event) => events.push(event),
      });
      try {
        assert.deepEqual(
          events.filter((event) => event.type === 'not-resumed').map((event) => event.code),
          ['ORIGIN_NOT_FOUND'],
        );
        assert.throws(() => second.status(hex), { code: 'SWARM_UNKNOWN_MODEL' });
        await sleep(200);
        assert.equal(asked, askedBefore, 'the restarted agent asked the origin again');
        // The user fixes the source and pulls again: the model is joined afresh and its job is plain.
        await second.join({ source: origin.url, manifest });
        await second.whenComplete(hex);
        const rejoined = JSON.parse(await readFile(join(cacheDir, hex, 'job.json'), 'utf8')) as {
          stopped?: unknown;
        };
        assert.equal(rejoined.stopped, undefined);
      } finally {
        await second.close();
      }
    } finally {
      await new Promise<void>((resolve) => gone.close(() => resolve()));
    }
  });
});
