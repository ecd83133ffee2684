/**
 * A pull through an agent that is not there, or that dies mid-pull, fails with AGENT_UNREACHABLE,
 * saying which agent and what to do, instead of a scheduler error or a hang; one interrupted says
 * that the agent goes on. A real agent process
 * killed with SIGKILL under a real pull process; a slowed file server keeps the pull under way.
 */

import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import { CLI, startProcess, stopProcess, type Proc } from '../../scripts/cluster.js';
import { isWeightcastError } from '../../src/errors.js';
import { encodeManifest, manifestDigest, type Manifest } from '../../src/manifest/manifest.js';
import { startFileServer, type FileServer } from '../../src/origin/file-server.js';
import { Agent } from '../../src/swarm/agent/agent.js';
import { agentPull } from '../../src/swarm/agent-pull.js';
import { startScheduler, type SchedulerServer } from '../../src/swarm/scheduler/scheduler-server.js';
import { freePort, tempDir, smallModelWithManifest } from '../helpers/fixtures.js';

const run = promisify(execFile);

let work: { path: string; cleanup: () => Promise<void> };
let manifest: Manifest;
let manifestPath: string;
let server: FileServer;
let scheduler: SchedulerServer;

before(async () => {
  work = await tempDir('agent-gone');
  const fixture = await smallModelWithManifest(work.path);
  const { modelDir } = fixture;
  ({ manifest, manifestPath } = fixture);
  // ~100 KB/s: the model takes several seconds, so the pull is still waiting when its agent dies.
  server = await startFileServer({ root: modelDir, rateBytesPerSecond: 100_000 });
  scheduler = await startScheduler();
});

after(async () => {
  await server.close();
  await scheduler.close();
  await work.cleanup();
});

describe('a pull through an agent', { timeout: 60_000 }, () => {
  it('whose agent dies mid-pull fails with AGENT_UNREACHABLE (exit 1)', async () => {
    let agent: Proc | undefined;
    try {
      agent = await startProcess(
        [CLI, 'agent', '--scheduler', scheduler.url, '--cache', join(work.path, 'cache'), '--port', '0'],
        /listening on (http:\/\/\S+)/,
        'agent',
      );
      const pull = run(
        process.execPath,
        [
          CLI,
          'pull',
          server.url,
          '--to',
          join(work.path, 'dest'),
          '--manifest',
          manifestPath,
          '--agent',
          agent.url,
        ],
        { timeout: 30_000 },
      ).then(
        () => assert.fail('the pull should fail'),
        (error: { code?: number; stderr?: string }) => error,
      );
      // Killed once it has joined the model and is fetching it. It logs the join just before it
      // answers the pull, so the kill waits for a verified piece too: the answer went out before any
      // fetch's bytes could land, and the pull is past its join, waiting on the agent.
      const joined = (): boolean => agent?.lines.some((line) => line.includes('joined')) === true;
      for (let wait = 0; wait < 100 && !joined(); wait++)
        await new Promise((resolve) => setTimeout(resolve, 50));
      assert.ok(joined(), 'the agent never joined the model');
      const hex = manifestDigest(manifest).slice('sha256:'.length);
      const held = async (): Promise<number> => {
        const answer = await fetch(`${agent?.url}/v1/local/models/${hex}`).catch(() => undefined);
        return answer?.ok === true ? ((await answer.json()) as { held: number }).held : 0;
      };
      let pieces = 0;
      for (let wait = 0; wait < 200 && pieces === 0; wait++) {
        pieces = await held();
        if (pieces === 0) await new Promise((resolve) => setTimeout(resolve, 50));
      }
      assert.ok(pieces > 0, 'the agent verified no piece');
      agent.child.kill('SIGKILL');
      const failed = await pull;
      assert.equal(failed.code, 1, failed.stderr);
      assert.match(failed.stderr ?? '', /AGENT_UNREACHABLE: the agent at http:\S+ stopped answering \(/);
      assert.match(failed.stderr ?? '', /run the pull again once it is back, or with --no-agent/);
    } finally {
      await stopProcess(agent, 'SIGKILL');
    }
  });

  it('interrupted, says that the agent goes on fetching the model', async () => {
    const agent = await Agent.start({
      schedulerUrl: scheduler.url,
      cacheDir: join(work.path, 'cache-interrupted'),
    });
    const controller = new AbortController();
    try {
      const pulled = agentPull(server.url, join(work.path, 'interrupted'), {
        manifestBytes: encodeManifest(manifest),
        manifestName: manifestPath,
        agentUrl: agent.url,
        signal: controller.signal,
        onProgress: () => controller.abort(),
      });
      await assert.rejects(
        pulled,
        (error: unknown) =>
          isWeightcastError(error, 'ABORTED') &&
          /the agent at .* goes on fetching the model/.test(String(error)),
      );
      // It does: more pieces arrive after the pull left (the whole model would take ~18 s here).
      const hex = manifestDigest(manifest).slice('sha256:'.length);
      const heldThen = agent.status(hex).held;
      for (let wait = 0; wait < 400 && agent.status(hex).held <= heldThen; wait++)
        await new Promise((resolve) => setTimeout(resolve, 50));
      assert.ok(agent.status(hex).held > heldThen, 'the agent stopped fetching when the pull left');
      assert.equal(agent.status(hex).failed, undefined);
    } finally {
      await agent.close();
    }
  });

  it('whose --agent URL is some other server says so', async () => {
    await assert.rejects(
      agentPull(server.url, join(work.path, 'not-an-agent'), {
        manifestBytes: encodeManifest(manifest),
        manifestName: manifestPath,
        agentUrl: server.url,
      }),
      (error: unknown) =>
        isWeightcastError(error, 'SWARM_PROTOCOL') &&
        /does not answer as a weightcast agent \(.*answered .*\); --agent takes an agent's URL/.test(
          String(error),
        ),
    );
  });

  it('where no agent answers fails with AGENT_UNREACHABLE once its start-up wait is over', async () => {
    const port = await freePort();
    await assert.rejects(
      agentPull(server.url, join(work.path, 'nowhere'), {
        manifestBytes: encodeManifest(manifest),
        manifestName: manifestPath,
        agentUrl: `http://127.0.0.1:${port}`,
        agentStartWaitMs: 300,
      }),
      (error: unknown) =>
        isWeightcastError(error, 'AGENT_UNREACHABLE') &&
        /did not answer \(.*ECONNREFUSED/.test(String(error)),
    );
  });
});
