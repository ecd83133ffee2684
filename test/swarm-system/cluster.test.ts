/**
 * The real swarm, as separate processes on loopback: an origin file server, a scheduler and agents
 * started with the CLI. Every test checks the copies byte for byte against the origin's files.
 */

import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { readdir, readFile } from 'node:fs/promises';
import { promisify } from 'node:util';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { buildManifest } from '../../src/manifest/build.js';
import type { Manifest } from '../../src/manifest/manifest.js';
import { LocalOrigin } from '../../src/origin/local.js';
import { synthesizeModel } from '../../src/synth/synth.js';
import { CLI, Cluster } from '../../scripts/cluster.js';
import { writeManifest } from '../../src/manifest/manifest.js';
import { identicalToOrigin } from '../../scripts/swarm-demo-check.js';
import { tempDir } from '../helpers/fixtures.js';

const PIECE = 128 * 1024;
let work: { path: string; cleanup: () => Promise<void> };
let modelDir: string;
let manifest: Manifest;
let size: number;

before(async () => {
  work = await tempDir('cluster');
  modelDir = join(work.path, 'origin');
  const model = await synthesizeModel({
    dir: modelDir,
    arch: 'llama',
    dtype: 'bf16',
    sizeBytes: 6 * 1024 * 1024,
    shards: 2,
    seed: 3,
  });
  size = model.totalBytes;
  const local = new LocalOrigin(modelDir);
  manifest = await buildManifest(local, { pieceSize: PIECE }).finally(() => local.close());
});

after(async () => {
  await work.cleanup();
});

async function withCluster(
  name: string,
  options: {
    hosts: number;
    hostMbps?: number;
    originMbps?: number;
    corruptAgents?: number[];
    hostTimeoutMs?: number;
    transferUnit?: number;
    agentArgs?: string[];
    schedulerArgs?: string[];
    racks?: (string | undefined)[];
  },
  body: (cluster: Cluster) => Promise<void>,
): Promise<void> {
  const cluster = await Cluster.start({ modelDir, manifest, workDir: join(work.path, name), ...options });
  try {
    await body(cluster);
  } finally {
    await cluster.close();
  }
}

async function assertCopies(cluster: Cluster, indices: readonly number[]): Promise<void> {
  for (const i of indices) {
    assert.ok(
      await identicalToOrigin(cluster.cacheFilesDir(i), modelDir, manifest),
      `agent ${i}'s copy differs from the origin`,
    );
  }
}

const run = promisify(execFile);

/** Every agent joins; resolves once all hold identical copies. */
async function fillAll(cluster: Cluster, hosts: number): Promise<void> {
  const started = performance.now();
  await Promise.all(all(hosts).map((i) => cluster.join(i)));
  await cluster.waitComplete(all(hosts), started, 60_000);
  await assertCopies(cluster, all(hosts));
}

/** Peer uploads the agents answered from memory and from their files, summed. */
async function uploadSources(cluster: Cluster, hosts: number): Promise<{ memory: number; disk: number }> {
  const agents = await Promise.all(all(hosts).map((i) => cluster.status(i)));
  return {
    memory: agents.reduce((sum, agent) => sum + (agent.uploadsFromMemory ?? 0), 0),
    disk: agents.reduce((sum, agent) => sum + (agent.uploadsFromDisk ?? 0), 0),
  };
}

const all = (n: number): number[] => Array.from({ length: n }, (_, i) => i);

describe('swarm of processes on loopback', { timeout: 120_000 }, () => {
  it('delivers identical copies to every agent with the origin sending each byte about once', async () => {
    await withCluster(
      'basic',
      { hosts: 4, hostMbps: 80, originMbps: 80, transferUnit: 3 },
      async (cluster) => {
        await fillAll(cluster, 4);
        // Peers were served the runs they asked for from memory (the parent verified them last) far
        // more often than from disk.
        const uploads = await uploadSources(cluster, 4);
        assert.ok(
          uploads.memory > 2 * uploads.disk,
          `uploads from memory ${uploads.memory}, from disk ${uploads.disk}`,
        );
        const status = await cluster.schedulerStatus();
        // The scheduler moved the model in transfers of 3 pieces (units never span two files).
        const pieces = manifest.files.reduce((sum, file) => sum + file.pieces.length, 0);
        const units = manifest.files.reduce((sum, file) => sum + Math.ceil(file.pieces.length / 3), 0);
        assert.equal(status.pieceCount, units, `${pieces} pieces`);
        const originShare = status.originBytesAssigned / size;
        // A naive pull would cost 4 x S at the origin.
        assert.ok(originShare <= 1.5, `origin sent ${originShare.toFixed(2)} x S`);
        // A peer without the wire reads a unit over HTTP: a range running on through held pieces.
        const shard = manifest.files.reduce((a, b) => (b.size > a.size ? b : a));
        const response = await fetch(`${cluster.agentUrl(0)}/v1/models/${cluster.hex}/files/${shard.path}`, {
          headers: { range: `bytes=${PIECE + 10}-${3 * PIECE + 9}` },
          signal: AbortSignal.timeout(10_000),
        });
        assert.equal(response.status, 206);
        const served = Buffer.from(await response.arrayBuffer());
        const original = await readFile(join(modelDir, shard.path));
        assert.ok(served.equals(original.subarray(PIECE + 10, 3 * PIECE + 10)), 'the span over HTTP differs');
      },
    );
  });

  // With transfers of 2 pieces the agent flips the first byte of a transfer's second piece: the
  // first piece is stored, the second rejected and the sender blamed.
  for (const transferUnit of [1, 2]) {
    it(`delivers 0 corrupt bytes when an agent serves corrupted pieces, and demotes that agent (transfers of ${transferUnit} pieces)`, async () => {
      await withCluster(
        `corrupt-${transferUnit}`,
        { hosts: 4, hostMbps: 80, originMbps: 40, corruptAgents: [0], transferUnit },
        async (cluster) => {
          const started = performance.now();
          await Promise.all(all(4).map((i) => cluster.join(i)));
          await cluster.waitComplete(all(4), started, 60_000);
          await assertCopies(cluster, all(4));
          const statuses = await Promise.all([1, 2, 3].map((i) => cluster.status(i)));
          const caught = statuses.reduce((sum, s) => sum + s.corruptPieces, 0);
          assert.ok(caught > 0, 'no corrupt piece was ever served, so the test proves nothing');
          const view = await cluster.schedulerStatus();
          const bad = view.hosts.find((h) => h.url === cluster.agentUrl(0));
          assert.ok(
            bad !== undefined && (bad.demoted || bad.banned),
            `agent 0 not penalised: ${JSON.stringify(bad)}`,
          );
          // Blame needs evidence: the hosts that served good bytes are banned by nobody.
          for (const i of [1, 2, 3]) {
            const honest = view.hosts.find((h) => h.url === cluster.agentUrl(i));
            assert.equal(honest?.banned, false, `honest agent ${i} banned: ${JSON.stringify(honest)}`);
          }
        },
      );
    });
  }

  /**
   * Per piece, each host would have had a transfer planned (4 x pieces); in a ring or chain of 4
   * only the origin's first copies are (a few more if a push and a first copy crossed).
   */
  async function assertOnlyFirstCopiesPlanned(
    cluster: Cluster,
  ): Promise<Awaited<ReturnType<Cluster['schedulerStatus']>>> {
    const status = await cluster.schedulerStatus();
    const pieces = manifest.files.reduce((sum, file) => sum + file.pieces.length, 0);
    assert.ok(
      status.transfersVerified < 1.5 * pieces,
      `${status.transfersVerified} transfers planned for ${pieces} pieces`,
    );
    return status;
  }

  it('ring mode: agents push pieces along a ring; the scheduler plans only the first copies', async () => {
    await withCluster(
      'ring',
      { hosts: 4, hostMbps: 80, originMbps: 80, schedulerArgs: ['--ring-push'] },
      async (cluster) => {
        await fillAll(cluster, 4);
        const status = await assertOnlyFirstCopiesPlanned(cluster);
        assert.ok(
          status.originBytesAssigned / size <= 1.1,
          `origin sent ${status.originBytesAssigned / size} x S`,
        );
        assert.deepEqual(status.ring, { members: 4, fed: 4, cut: 0 }, 'no ring link was lost');
      },
    );
  });

  it('ring mode as a chain: the first agent reads the model from the origin, the others get it pushed', async () => {
    await withCluster(
      'chain',
      { hosts: 4, hostMbps: 80, originMbps: 80, schedulerArgs: ['--ring-push', '--ring-chain'] },
      async (cluster) => {
        await fillAll(cluster, 4);
        const status = await assertOnlyFirstCopiesPlanned(cluster);
        assert.deepEqual(status.ring, { members: 4, fed: 3, cut: 0 }, 'no chain link was lost');
      },
    );
  });

  it('a chain member killed with kill -9: the member behind it opens its feed again and is bridged, not cut out', async () => {
    await withCluster(
      'chain-kill',
      { hosts: 4, hostMbps: 24, originMbps: 24, schedulerArgs: ['--ring-chain'] },
      async (cluster) => {
        const started = performance.now();
        // One at a time: the chain takes members in the order they join, so it is 0 -> 1 -> 2 -> 3.
        for (const i of all(4)) await cluster.join(i);
        const tail = await cluster.untilHeld(3, 6);
        assert.ok(tail.held >= 6 && tail.held < tail.pieceCount, `the tail held ${tail.held} pieces`);
        cluster.agents[1]!.child.kill('SIGKILL');
        const survivors = [0, 2, 3];
        await cluster.waitComplete(survivors, started, 60_000);
        await assertCopies(cluster, survivors);
        const status = await cluster.schedulerStatus();
        // Agent 2's feed broke mid-piece (and with it agent 3's, fed that piece as it arrived): both
        // opened theirs again, 2 to agent 0 once the scheduler bridged the gap. Reported at once,
        // the broken feeds would have cut both out of the chain for good.
        assert.deepEqual(status.ring, { members: 3, fed: 2, cut: 0 }, 'a chain link was cut');
        for (const i of [2, 3]) {
          const lost = cluster.agents[i]!.lines.filter((line) => line.includes('ring feed'));
          assert.deepEqual(lost, [], `agent ${i} reported its feed lost`);
        }
      },
    );
  });

  it('a chain whose scheduler is stopped (SIGSTOP): the head reads the origin on its own and the others keep taking its pushes', async () => {
    await withCluster(
      'chain-stop',
      { hosts: 4, hostMbps: 8, originMbps: 8, schedulerArgs: ['--ring-chain'] },
      async (cluster) => {
        const started = performance.now();
        // One at a time: the chain is 0 -> 1 -> 2 -> 3, and agent 0 reads the origin for it.
        for (const i of all(4)) await cluster.join(i);
        const tail = await cluster.untilHeld(3, 4);
        assert.ok(tail.held >= 4 && tail.held < tail.pieceCount / 2, `the tail held ${tail.held} pieces`);
        const scheduler = cluster.scheduler.child;
        scheduler.kill('SIGSTOP');
        try {
          await cluster.waitComplete(all(4), started, 60_000);
        } finally {
          scheduler.kill('SIGCONT');
        }
        await assertCopies(cluster, all(4));
        const statuses = await Promise.all(all(4).map((i) => cluster.status(i)));
        // The members behind the head fetched nothing on their own: on their own after the
        // scheduler's silence, they would each have read their stripe of the origin.
        for (const i of [1, 2, 3])
          assert.equal(
            statuses[i]!.originBytes,
            0,
            `agent ${i} read ${statuses[i]!.originBytes} bytes from the origin`,
          );
        // Every first copy came from the head, once (a read it had been assigned may cross one of its own).
        assert.ok(
          statuses[0]!.originBytes >= size && statuses[0]!.originBytes <= 1.1 * size,
          `the head read ${statuses[0]!.originBytes / size} x S from the origin`,
        );
      },
    );
  });

  it('a chain that loses a member while its scheduler is stopped: the member behind the gap subscribes to the host before it', async () => {
    await withCluster(
      'chain-stop-kill',
      { hosts: 4, hostMbps: 4, originMbps: 4, schedulerArgs: ['--ring-chain'] },
      async (cluster) => {
        const started = performance.now();
        // One at a time: the chain is 0 -> 1 -> 2 -> 3, and agent 0 reads the origin for it.
        for (const i of all(4)) await cluster.join(i);
        await cluster.untilHeld(3, 2);
        const scheduler = cluster.scheduler.child;
        scheduler.kill('SIGSTOP');
        const survivors = [0, 2, 3];
        try {
          // Agent 2 on its own (the scheduler's silence), then its parent dies.
          const onItsOwn = (): boolean =>
            cluster.agents[2]!.lines.some((line) => line.includes('no scheduler ('));
          for (let tries = 0; tries < 300 && !onItsOwn(); tries++) await sleep(50);
          assert.ok(onItsOwn(), 'agent 2 did not find its scheduler gone within 15 s');
          const behind = await cluster.status(2);
          assert.ok(behind.held < behind.pieceCount, 'agent 2 finished before its parent was killed');
          cluster.agents[1]!.child.kill('SIGKILL');
          await cluster.waitComplete(survivors, started, 60_000);
        } finally {
          scheduler.kill('SIGCONT');
        }
        await assertCopies(cluster, survivors);
        const own = cluster.agents[2]!.lines.filter((line) => line.includes('subscribed to'));
        assert.deepEqual(
          own.map((line) => line.replace(/.*subscribed to (\S+) itself.*/, '$1')),
          [cluster.agents[0]!.url],
          'agent 2 subscribed to agent 0 on its own, once',
        );
        // Behind the gap, everything came pushed along the mended chain: nothing from the origin.
        for (const i of [2, 3]) {
          const status = await cluster.status(i);
          assert.equal(status.originBytes, 0, `agent ${i} read ${status.originBytes} bytes from the origin`);
        }
      },
    );
  });

  it('a chain headed by an agent that pushes corrupt bytes: it goes to the tail, and every copy is still exact', async () => {
    await withCluster(
      'chain-corrupt-head',
      { hosts: 4, hostMbps: 24, originMbps: 24, corruptAgents: [0], schedulerArgs: ['--ring-chain'] },
      async (cluster) => {
        const started = performance.now();
        // One at a time: agent 0 heads the chain.
        for (const i of all(4)) await cluster.join(i);
        await cluster.waitComplete(all(4), started, 60_000);
        await assertCopies(cluster, all(4));
        const statuses = await Promise.all(all(4).map((i) => cluster.status(i)));
        const caught = statuses.reduce((sum, s) => sum + s.corruptPieces, 0);
        assert.ok(caught > 0, 'no corrupt piece was ever pushed, so the test proves nothing');
        const status = await cluster.schedulerStatus();
        // The liar went to the tail (fed, feeding nobody); no honest link was cut.
        assert.deepEqual(status.ring, { members: 4, fed: 3, cut: 0 });
        const origin = statuses.reduce((sum, s) => sum + s.originBytes, 0);
        assert.ok(origin <= 1.25 * size, `the origin sent ${origin / size} x S`);
      },
    );
  });

  it('ring mode: a ring parent that pushes corrupt bytes is cut out, and every copy is still exact', async () => {
    await withCluster(
      'ring-corrupt',
      { hosts: 4, hostMbps: 80, originMbps: 40, corruptAgents: [1], schedulerArgs: ['--ring-push'] },
      async (cluster) => {
        const started = performance.now();
        await Promise.all(all(4).map((i) => cluster.join(i)));
        await cluster.waitComplete(all(4), started, 60_000);
        await assertCopies(cluster, all(4));
        const statuses = await Promise.all([0, 2, 3].map((i) => cluster.status(i)));
        const caught = statuses.reduce((sum, s) => sum + s.corruptPieces, 0);
        assert.ok(caught > 0, 'no corrupt piece was ever pushed, so the test proves nothing');
      },
    );
  });

  for (const transferUnit of [1, 3]) {
    it(`resumes an agent killed with kill -9 without refetching the pieces it had verified (transfers of ${transferUnit} pieces)`, async () => {
      await withCluster(
        `kill9-${transferUnit}`,
        { hosts: 3, hostMbps: 24, originMbps: 24, transferUnit },
        async (cluster) => {
          const started = performance.now();
          await Promise.all(all(3).map((i) => cluster.join(i)));
          const before = (await cluster.untilHeld(2, 8)).held;
          assert.ok(
            before > 0 && before < (await cluster.status(2)).pieceCount,
            `agent 2 held ${before} pieces when killed`,
          );
          cluster.agents[2]!.child.kill('SIGKILL');
          await sleep(200);
          // The restarted agent finds the model in its cache and resumes it without being asked.
          const restarted = await cluster.startAgent(2);
          // The restarted agent says how many verified pieces it found before fetching anything.
          const joined = restarted.lines.map((line) => /joined, (\d+) of/.exec(line)).find((m) => m !== null);
          assert.ok(joined, restarted.lines.join('\n'));
          const resumed = Number(joined[1]);
          assert.ok(
            resumed >= before,
            `resumed with ${resumed} pieces, had ${before} verified before kill -9`,
          );
          await cluster.waitComplete(all(3), started, 60_000);
          const after = await cluster.status(2);
          // Pieces stored after the restart (copies that raced in twice not counted) fit in what was
          // missing: even if the resumed pieces were the smallest ones.
          const lengths = manifest.files.flatMap((f) =>
            f.pieces.map((_, i) => Math.min(PIECE, f.size - i * PIECE)),
          );
          const resumedBytesMin = lengths
            .sort((x, y) => x - y)
            .slice(0, resumed)
            .reduce((a, b) => a + b, 0);
          const fetched = after.originBytes + after.peerBytes;
          assert.ok(
            fetched <= size - resumedBytesMin,
            `stored ${fetched} bytes after resuming ${resumed} pieces`,
          );
          await assertCopies(cluster, all(3));
        },
      );
    });
  }

  it('an agent restarted while its scheduler is stopped fetches from the peers it knew before', async () => {
    await withCluster('stop-restart', { hosts: 3, hostMbps: 8, originMbps: 8 }, async (cluster) => {
      const started = performance.now();
      await Promise.all(all(3).map((i) => cluster.join(i)));
      const before = await cluster.untilHeld(2, 4);
      assert.ok(before.held < before.pieceCount, 'agent 2 finished before it was killed');
      const scheduler = cluster.scheduler.child;
      scheduler.kill('SIGSTOP');
      try {
        const killed = cluster.agents[2]!.child;
        const gone = new Promise((resolve) => killed.once('exit', resolve));
        killed.kill('SIGKILL');
        await gone;
        // The same cache and port: it takes the model up again, and cannot register.
        await cluster.startAgent(2);
        await cluster.waitComplete(all(3), started, 60_000);
      } finally {
        scheduler.kill('SIGCONT');
      }
      await assertCopies(cluster, all(3));
      // Its peers came from the scheduler, which it never reached after the restart: knowing none,
      // it would have read everything it lacked from the origin.
      const restarted = await cluster.status(2);
      assert.ok(restarted.peerBytes > 0, `the restarted agent took ${restarted.peerBytes} bytes from peers`);
    });
  });

  it('completes when the scheduler is killed mid-run, and agents register again when it is back', async () => {
    await withCluster('scheduler-kill', { hosts: 3, hostMbps: 24, originMbps: 24 }, async (cluster) => {
      const started = performance.now();
      await Promise.all(all(3).map((i) => cluster.join(i)));
      await cluster.untilHeld(0, 6);
      cluster.scheduler.child.kill('SIGKILL');
      await cluster.waitComplete(all(3), started, 60_000);
      await assertCopies(cluster, all(3));
      const registrations = (i: number): number =>
        cluster.agents[i]!.lines.filter((line) => line.includes('registered with the scheduler')).length;
      await cluster.startScheduler();
      for (let tries = 0; tries < 200 && !all(3).every((i) => registrations(i) >= 2); tries++)
        await sleep(50);
      assert.ok(
        all(3).every((i) => registrations(i) >= 2),
        'agents did not register with the restarted scheduler',
      );
    });
  });

  it('with a cluster token, members left without a scheduler fetch from their peers, not the origin', async () => {
    // Every process of the cluster inherits the token: peers then answer only with it, the have-maps
    // a member on its own asks for included.
    const saved = process.env['WEIGHTCAST_CLUSTER_TOKEN'];
    process.env['WEIGHTCAST_CLUSTER_TOKEN'] = 'fallback-test-token-0123456789';
    try {
      await withCluster('fallback-token', { hosts: 3, hostMbps: 80, originMbps: 16 }, async (cluster) => {
        const started = performance.now();
        await cluster.join(0);
        await cluster.waitComplete([0], started, 60_000);
        await Promise.all([1, 2].map((i) => cluster.join(i)));
        await cluster.untilHeld(1, 2);
        const before = (await cluster.status(1)).held + (await cluster.status(2)).held;
        cluster.scheduler.child.kill('SIGKILL');
        await cluster.waitComplete(all(3), started, 60_000);
        await assertCopies(cluster, all(3));
        const [one, two] = [await cluster.status(1), await cluster.status(2)];
        const originShare = (one.originBytes + two.originBytes) / size;
        // Host 0 holds everything: fetching on their own, hosts 1 and 2 take it from host 0. Had its
        // have-map been refused (no token sent), they would read the rest from the origin's stripes.
        assert.ok(
          originShare < 0.25,
          `hosts 1 and 2 read ${originShare.toFixed(2)} x S from the origin (they held ${before} pieces at the kill)`,
        );
      });
    } finally {
      if (saved === undefined) delete process.env['WEIGHTCAST_CLUSTER_TOKEN'];
      else process.env['WEIGHTCAST_CLUSTER_TOKEN'] = saved;
    }
  });

  it('members left without a scheduler bring each piece into their rack about once', async () => {
    // Host 0 (rack b) holds the model; hosts 1 and 2 (rack a) lose the scheduler early and go on alone.
    await withCluster(
      'fallback-racks',
      { hosts: 3, hostMbps: 80, originMbps: 16, racks: ['b', 'a', 'a'] },
      async (cluster) => {
        const started = performance.now();
        await cluster.join(0);
        await cluster.waitComplete([0], started, 60_000);
        await Promise.all([1, 2].map((i) => cluster.join(i)));
        for (let tries = 0; tries < 400; tries++) {
          if ((await cluster.status(1)).registered && (await cluster.status(2)).registered) break;
          await sleep(20);
        }
        cluster.scheduler.child.kill('SIGKILL');
        const served = async (): Promise<number> => {
          const status = await cluster.status(0);
          return (status.uploadsFromMemory ?? 0) + (status.uploadsFromDisk ?? 0);
        };
        const [servedBefore, one, two] = [await served(), await cluster.status(1), await cluster.status(2)];
        const pieceTotal = manifest.files.reduce((sum, file) => sum + file.pieces.length, 0);
        const missing = 2 * pieceTotal - one.held - two.held;
        await cluster.waitComplete(all(3), started, 60_000);
        await assertCopies(cluster, all(3));
        const crossed = (await served()) - servedBefore;
        console.log(
          `host 0 served ${crossed} pieces into rack a after the kill; rack a lacked ${missing} piece copies`,
        );
        // Each piece crosses into rack a about once, and the rack-mates pass it on to each other.
        assert.ok(
          crossed <= 0.75 * missing,
          `host 0 served ${crossed} of the ${missing} copies rack a lacked`,
        );
      },
    );
  });

  it('pulls through the swarm in-process (pull --scheduler) and through a local agent (pull --agent)', async () => {
    await withCluster('pulls', { hosts: 2, hostMbps: 80, originMbps: 40 }, async (cluster) => {
      const manifestPath = join(work.path, 'pulls', 'manifest.json');
      await writeManifest(manifestPath, manifest);
      await Promise.all(all(2).map((i) => cluster.join(i)));
      const viaScheduler = join(work.path, 'pulls', 'via-scheduler');
      const viaAgent = join(work.path, 'pulls', 'via-agent');
      const [scheduled, agented] = await Promise.all([
        run(
          process.execPath,
          [
            CLI,
            'pull',
            cluster.originUrl,
            '--to',
            viaScheduler,
            '--manifest',
            manifestPath,
            '--scheduler',
            cluster.scheduler.url,
            '--json',
          ],
          { timeout: 60_000 },
        ),
        run(
          process.execPath,
          [
            CLI,
            'pull',
            cluster.originUrl,
            '--to',
            viaAgent,
            '--manifest',
            manifestPath,
            '--agent',
            cluster.agentUrl(1),
            '--json',
          ],
          { timeout: 60_000 },
        ),
      ]);
      for (const [out, dir] of [
        [scheduled.stdout, viaScheduler],
        [agented.stdout, viaAgent],
      ] as const) {
        const done = JSON.parse(out.trim().split('\n').pop() ?? '{}') as {
          event?: string;
          verified?: boolean;
        };
        assert.equal(done.event, 'done', out);
        assert.ok(await identicalToOrigin(dir, modelDir, manifest), `${dir} differs from the origin`);
      }
      // The in-process pull leaves only the model and its state folder behind.
      const names = (await readdir(viaScheduler)).sort();
      assert.deepEqual(names, ['.weightcast', ...manifest.files.map((f) => f.path.split('/')[0]!)].sort());
      // Without a manifest a swarm pull refuses: peers are only trusted for bytes a manifest names.
      await assert.rejects(
        run(process.execPath, [
          CLI,
          'pull',
          cluster.originUrl,
          '--to',
          join(work.path, 'pulls', 'x'),
          '--scheduler',
          cluster.scheduler.url,
        ]),
        (error: { stderr?: string; code?: number }) =>
          error.code === 2 && /SWARM_NEEDS_MANIFEST/.test(error.stderr ?? ''),
      );
    });
  });

  it('with --recent-mb 0 keeps no pieces in memory: every upload is read from the files, copies identical', async () => {
    await withCluster(
      'no-recent',
      { hosts: 3, hostMbps: 80, originMbps: 80, agentArgs: ['--recent-mb', '0'] },
      async (cluster) => {
        await fillAll(cluster, 3);
        const uploads = await uploadSources(cluster, 3);
        assert.equal(uploads.memory, 0);
        assert.ok(uploads.disk > 0);
      },
    );
  });

  it('answers a local byte-range read that arrives before its pieces, with the right bytes', async () => {
    await withCluster('lazy', { hosts: 1, hostMbps: 16, originMbps: 16 }, async (cluster) => {
      await cluster.join(0);
      const file = [...manifest.files].sort((a, b) => b.size - a.size)[0]!;
      const start = file.size - 3 * PIECE - 1000;
      const end = file.size - 1;
      const before = await cluster.status(0);
      const response = await fetch(
        `${cluster.agentUrl(0)}/v1/local/models/${cluster.hex}/files/${file.path}`,
        {
          headers: { range: `bytes=${start}-${end}` },
          signal: AbortSignal.timeout(60_000),
        },
      );
      assert.equal(response.status, 206);
      const body = Buffer.from(await response.arrayBuffer());
      const { readFile } = await import('node:fs/promises');
      const expected = (await readFile(join(modelDir, file.path))).subarray(start, end + 1);
      assert.ok(body.equals(expected), 'the range read returned other bytes than the origin holds');
      // Pieces that had just arrived went out from memory, not read back from disk.
      assert.ok(((await cluster.status(0)).localPiecesFromMemory ?? 0) > 0);
      // The read was asked before those pieces were held (the model was far from complete).
      assert.ok(!before.complete && before.held < before.pieceCount / 2, JSON.stringify(before));
      // A status request may wait for completion: it answers complete, not before.
      const statusUrl = `${cluster.agentUrl(0)}/v1/local/models/${cluster.hex}`;
      const waited = (await (
        await fetch(`${statusUrl}?waitCompleteMs=60000`, { signal: AbortSignal.timeout(70_000) })
      ).json()) as { complete: boolean; held: number; pieceCount: number };
      assert.ok(waited.complete && waited.held === waited.pieceCount, JSON.stringify(waited));
      const bad = await fetch(`${statusUrl}?waitCompleteMs=-5`, { signal: AbortSignal.timeout(10_000) });
      assert.equal(bad.status, 400);
    });
  });
});
