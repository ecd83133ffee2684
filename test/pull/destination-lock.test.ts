/**
 * One pull at a time into a destination: a second `weightcast pull` into the same `--to` (from the
 * origin, with `--scheduler` or through an agent) fails at once with PULL_DESTINATION_IN_USE naming
 * the first one's PID, instead of both fetching the whole model until one fails on the other's
 * renames, or joining the agent to the same model twice. The lock goes with its pull (success,
 * failure, Ctrl-C) and one left by a killed pull is taken over. Real pull and agent processes (an
 * agent with an empty cache for each test that needs one); the origin (throttled, so a pull lasts
 * a few seconds) and the scheduler run here.
 */

import assert from 'node:assert/strict';
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import { startFileServer, type FileServer } from '../../src/origin/file-server.js';
import { startScheduler, type SchedulerServer } from '../../src/swarm/scheduler/scheduler-server.js';
import { CLI, startProcess, stopProcess, type Proc } from '../../scripts/cluster.js';
import { sameFiles, tempDir, smallModelWithManifest } from '../helpers/fixtures.js';

const run = promisify(execFile);

/** The model (about 1 MB) takes about 4 s at this rate: long enough to start a second pull. */
const ORIGIN_BYTES_PER_SECOND = 256 * 1024;
const WAIT_MS = 20_000;

let work: { path: string; cleanup: () => Promise<void> };
let modelDir: string;
let manifestPath: string;
let paths: string[];
let origin: FileServer;
let scheduler: SchedulerServer;
const started: ChildProcess[] = [];
/** The agent of the test running, for pulls through an agent (withAgent). */
let agent: Proc | undefined;

before(async () => {
  work = await tempDir('destination-lock');
  const fixture = await smallModelWithManifest(work.path);
  ({ modelDir, manifestPath, paths } = fixture);
  origin = await startFileServer({ root: modelDir, rateBytesPerSecond: ORIGIN_BYTES_PER_SECOND });
  scheduler = await startScheduler();
});

after(async () => {
  // Only the pulls this test started, by their PIDs, should a test have failed while they ran.
  for (const child of started)
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  await origin.close();
  await scheduler.close();
  await work.cleanup();
});

interface Running {
  child: ChildProcess;
  pid: number;
  exited: Promise<{ code: number | null; stderr: string }>;
}

type Route = 'origin' | 'scheduler' | 'agent';

function routeArgs(route: Route): string[] {
  if (route === 'origin') return ['--no-agent'];
  if (route === 'scheduler') return ['--scheduler', scheduler.url];
  assert.ok(agent !== undefined, 'a pull through an agent runs inside withAgent');
  return ['--agent', agent.url];
}

function pullArgs(dest: string, route: Route): string[] {
  return [CLI, 'pull', origin.url, '--to', dest, '--manifest', manifestPath, ...routeArgs(route)];
}

function startPull(dest: string, route: Route): Running {
  const child = spawn(process.execPath, pullArgs(dest, route), { stdio: ['ignore', 'ignore', 'pipe'] });
  started.push(child);
  let stderr = '';
  child.stderr?.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const exited = new Promise<{ code: number | null; stderr: string }>((resolve) =>
    child.once('exit', (code) => resolve({ code, stderr })),
  );
  assert.ok(child.pid !== undefined, 'the pull did not start');
  return { child, pid: child.pid, exited };
}

/** Pulls into `dest` by each route in turn: each completes and leaves no lock; the model is there. */
async function laterPullsComplete(dest: string, routes: readonly Route[]): Promise<void> {
  for (const route of routes) {
    const next = await within(startPull(dest, route).exited, `a later ${route} pull ending`);
    assert.equal(next.code, 0, next.stderr);
    assert.equal(existsSync(lockOf(dest)), false);
  }
  assert.ok(await sameFiles(modelDir, dest, paths));
}

/** Runs `body` with an agent process of its own (an empty cache, writing into pulls' destinations). */
async function withAgent(name: string, body: () => Promise<void>): Promise<void> {
  const argv = [CLI, 'agent', '--scheduler', scheduler.url, '--cache', join(work.path, `cache-${name}`)];
  agent = await startProcess(
    [...argv, '--port', '0', '--destination-root', work.path],
    /listening on (http:\/\/\S+)/,
    'agent',
  );
  try {
    await body();
  } finally {
    await stopProcess(agent, 'SIGKILL');
    agent = undefined;
  }
}

/** How many times the agent joined a model: once per model, however many pulls asked for it. */
function agentJoins(): number {
  return agent?.lines.filter((line) => / joined, /.test(line)).length ?? 0;
}

async function within<T>(promise: Promise<T>, what: string): Promise<T> {
  const timeout = sleep(WAIT_MS, undefined, { ref: false }).then(() => {
    throw new Error(`${what} did not happen within ${WAIT_MS} ms`);
  });
  return Promise.race([promise, timeout]);
}

async function until(condition: () => boolean, what: string): Promise<void> {
  for (let waited = 0; !condition(); waited += 20) {
    if (waited >= WAIT_MS) throw new Error(`${what} did not happen within ${WAIT_MS} ms`);
    await sleep(20);
  }
}

async function untilExists(path: string): Promise<void> {
  await until(() => existsSync(path), `${path} appearing`);
}

/** A second pull, run to its end: its exit code and what it printed. */
async function secondPull(dest: string, route: Route): Promise<{ code: number; stderr: string }> {
  return run(process.execPath, pullArgs(dest, route), { timeout: WAIT_MS }).then(
    () => assert.fail('the second pull should have been refused'),
    (error: { code?: number; stderr?: string }) => ({ code: error.code ?? -1, stderr: error.stderr ?? '' }),
  );
}

const lockOf = (dest: string): string => join(dest, '.weightcast', 'pull.lock');

/** What a destination the agent wrote into holds at the end: the model, none of the scaffolding. */
async function assertOnlyModel(dest: string): Promise<void> {
  assert.ok(await sameFiles(modelDir, dest, paths));
  const topLevel = [...new Set(paths.map((path) => path.split('/')[0] as string))].sort();
  assert.deepEqual((await readdir(dest)).sort(), topLevel);
}

/** `body` inside withAgent for a pull through an agent, as it is for the others. */
async function withAgentFor(route: Route, name: string, body: () => Promise<void>): Promise<void> {
  return route === 'agent' ? withAgent(name, body) : body();
}

describe('two pulls into one destination', { timeout: 120_000 }, () => {
  it('refuses the second at once, naming the first, which completes and leaves no lock', async () => {
    const dest = join(work.path, 'plain');
    const first = startPull(dest, 'origin');
    await untilExists(lockOf(dest));
    const second = await secondPull(dest, 'origin');
    assert.equal(second.code, 1, second.stderr);
    assert.match(
      second.stderr,
      new RegExp(
        `PULL_DESTINATION_IN_USE: another pull \\(PID ${first.pid}\\) is writing into .*plain.*--to`,
      ),
    );
    assert.equal(first.child.exitCode, null, 'the second pull should fail while the first one runs');
    const done = await within(first.exited, 'the first pull ending');
    assert.equal(done.code, 0, done.stderr);
    assert.ok(await sameFiles(modelDir, dest, paths));
    // What a pull leaves after success, as before the lock: the manifest and the state file.
    assert.deepEqual((await readdir(join(dest, '.weightcast'))).sort(), ['manifest.json', 'pull.json']);
  });

  it('shares the lock between pull --scheduler and a pull from the origin', async () => {
    const dest = join(work.path, 'swarm');
    const first = startPull(dest, 'scheduler');
    await untilExists(lockOf(dest));
    for (const route of ['origin', 'scheduler'] as const) {
      const second = await secondPull(dest, route);
      assert.equal(second.code, 1, second.stderr);
      assert.match(second.stderr, new RegExp(`PULL_DESTINATION_IN_USE: another pull \\(PID ${first.pid}\\)`));
    }
    const done = await within(first.exited, 'the first pull ending');
    assert.equal(done.code, 0, done.stderr);
    assert.ok(await sameFiles(modelDir, dest, paths));
    assert.deepEqual(await readdir(join(dest, '.weightcast')), ['swarm']);
    assert.equal(existsSync(join(dest, '.weightcast', 'swarm', 'agent.lock')), false);
  });

  it('refuses any second pull while one through the agent runs, which completes and leaves no lock', async () => {
    await withAgent('two', async () => {
      const dest = join(work.path, 'through-agent');
      const first = startPull(dest, 'agent');
      await untilExists(lockOf(dest));
      // At once, so that all three are refused while the first is surely still under way.
      const seconds = await Promise.all(
        (['agent', 'origin', 'scheduler'] as const).map((route) => secondPull(dest, route)),
      );
      for (const second of seconds) {
        assert.equal(second.code, 1, second.stderr);
        assert.match(
          second.stderr,
          new RegExp(
            `PULL_DESTINATION_IN_USE: another pull \\(PID ${first.pid}\\) is writing into .*through-agent.*--to`,
          ),
        );
      }
      assert.equal(first.child.exitCode, null, 'the second pulls should fail while the first one runs');
      const done = await within(first.exited, 'the first pull ending');
      assert.equal(done.code, 0, done.stderr);
      // The agent wrote the files in place: its partial files' folder is gone, and the lock's too.
      await assertOnlyModel(dest);
      // Released: a later pull of either kind proceeds (and finds the model in place).
      await laterPullsComplete(dest, ['agent', 'origin']);
    });
  });

  it('refuses a pull through the agent while one from the origin runs, before it asks the agent', async () => {
    await withAgent('behind-plain', async () => {
      const dest = join(work.path, 'plain-then-agent');
      const first = startPull(dest, 'origin');
      await untilExists(lockOf(dest));
      const second = await secondPull(dest, 'agent');
      assert.equal(second.code, 1, second.stderr);
      assert.match(second.stderr, new RegExp(`PULL_DESTINATION_IN_USE: another pull \\(PID ${first.pid}\\)`));
      assert.equal(first.child.exitCode, null, 'the second pull should fail while the first one runs');
      assert.equal(agentJoins(), 0, 'the refused pull had the agent join the model');
      const done = await within(first.exited, 'the first pull ending');
      assert.equal(done.code, 0, done.stderr);
      assert.ok(await sameFiles(modelDir, dest, paths));
      assert.equal(existsSync(lockOf(dest)), false);
    });
  });
});

describe('the lock goes with its pull', { timeout: 120_000 }, () => {
  for (const route of ['origin', 'scheduler', 'agent'] as const) {
    it(`is released on Ctrl-C (${route}), and the same command then completes`, async () => {
      await withAgentFor(route, 'interrupted', async () => {
        const dest = join(work.path, `interrupted-${route}`);
        const first = startPull(dest, route);
        await untilExists(lockOf(dest));
        // Through an agent, once the agent writes into the destination: it goes on after the pull.
        if (route === 'agent') await until(() => agentJoins() === 1, 'the agent joining the model');
        first.child.kill('SIGINT');
        const stopped = await within(first.exited, 'the interrupted pull ending');
        assert.equal(stopped.code, 130, stopped.stderr);
        assert.match(stopped.stderr, /ABORTED/);
        assert.equal(existsSync(lockOf(dest)), false, 'an interrupted pull left its lock');
        const again = await within(startPull(dest, route).exited, 'the pull run again ending');
        assert.equal(again.code, 0, again.stderr);
        assert.ok(await sameFiles(modelDir, dest, paths));
        assert.equal(existsSync(lockOf(dest)), false);
        // The lock was taken beside the agent's partial files and goes with them.
        if (route === 'agent') await assertOnlyModel(dest);
      });
    });
  }

  it('left by a killed pull, is taken over by the next', async () => {
    const dest = join(work.path, 'killed');
    const first = startPull(dest, 'origin');
    await untilExists(lockOf(dest));
    first.child.kill('SIGKILL');
    await within(first.exited, 'the killed pull ending');
    assert.equal(existsSync(lockOf(dest)), true, 'a killed pull cannot remove its lock');
    await laterPullsComplete(dest, ['scheduler', 'origin']);
  });

  it('left by a killed pull through the agent, is taken over by the next', async () => {
    await withAgent('killed', async () => {
      const dest = join(work.path, 'killed-agent');
      const first = startPull(dest, 'agent');
      await until(() => agentJoins() === 1, 'the agent joining the model');
      first.child.kill('SIGKILL');
      await within(first.exited, 'the killed pull ending');
      assert.equal(existsSync(lockOf(dest)), true, 'a killed pull cannot remove its lock');
      const next = await within(startPull(dest, 'agent').exited, 'a pull after the kill ending');
      assert.equal(next.code, 0, next.stderr);
      assert.equal(existsSync(lockOf(dest)), false);
      await assertOnlyModel(dest);
    });
  });

  it('is released when the pull fails, and a source that does not answer leaves no directory', async () => {
    const dest = join(work.path, 'failed');
    const missing = await run(
      process.execPath,
      [CLI, 'pull', join(work.path, 'no-such-model'), '--to', dest, '--no-agent'],
      { timeout: WAIT_MS },
    ).then(
      () => assert.fail('a pull of a missing directory should fail'),
      (error: { code?: number; stderr?: string }) => error,
    );
    assert.equal(missing.code, 1, missing.stderr);
    assert.equal(existsSync(dest), false, 'a pull of a missing source left its destination behind');
    // The origin has no such files: the pull fails once it has started writing.
    const notFound = await run(
      process.execPath,
      [CLI, 'pull', `${origin.url}nothing/`, '--to', dest, '--manifest', manifestPath, '--no-agent'],
      { timeout: WAIT_MS },
    ).then(
      () => assert.fail('a pull of files the origin lacks should fail'),
      (error: { code?: number; stderr?: string }) => error,
    );
    assert.equal(notFound.code, 1, notFound.stderr);
    assert.match(notFound.stderr ?? '', /ORIGIN_NOT_FOUND/);
    assert.equal(existsSync(lockOf(dest)), false, 'a failed pull left its lock');
  });

  it('is released when a pull through the agent fails (its agent killed), and the same command then completes', async () => {
    const dest = join(work.path, 'failed-agent');
    await withAgent('failed', async () => {
      const first = startPull(dest, 'agent');
      await until(() => agentJoins() === 1, 'the agent joining the model');
      agent?.child.kill('SIGKILL');
      const failed = await within(first.exited, 'the pull whose agent was killed ending');
      assert.equal(failed.code, 1, failed.stderr);
      // The agent logs its join just before it answers it: killed in between, the pull's join fails
      // and it says the agent "did not answer" (after waiting for one that may be restarting).
      assert.match(failed.stderr, /AGENT_UNREACHABLE: the agent at \S+ (stopped answering|did not answer)/);
      assert.equal(existsSync(lockOf(dest)), false, 'a failed pull left its lock');
    });
    // The agent started again on its cache resumes the model; the pull run again finds it.
    await withAgent('failed', async () => {
      const again = await within(startPull(dest, 'agent').exited, 'the pull run again ending');
      assert.equal(again.code, 0, again.stderr);
      assert.equal(existsSync(lockOf(dest)), false);
      await assertOnlyModel(dest);
    });
  });
});
