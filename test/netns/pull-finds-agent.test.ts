/**
 * `weightcast pull` as a user runs it on a host: no --agent and no $WEIGHTCAST_AGENT, so the pull
 * probes 127.0.0.1 on the default agent port. The test makes a network namespace of its own, where
 * that port holds nothing but what the test starts there, and runs real processes in it: an origin
 * (`weightcast serve`), a scheduler, and an agent on its default port. With the agent, the pull says
 * it found it and the agent writes the files; with nothing on the port, or a server there that is not
 * an agent, the pull fetches from the origin itself and ends promptly. Needs root and `ip netns`;
 * skipped (with the reason) anywhere else.
 */

import assert from 'node:assert/strict';
import { execFile, execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, it, type TestContext } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import { ChildRegistry, firstMatch, onAbruptEnd, stopChild } from '../../bench/netns/children.js';
import { AGENT_PORT_DEFAULT } from '../../src/swarm/agent/defaults.js';
import { CLI } from '../../scripts/cluster.js';
import { sameFiles, tempDir, smallModelWithManifest } from '../helpers/fixtures.js';

const execFileAsync = promisify(execFile);

/** Bounds on every wait: an `ip` call, a service printing that it listens, a pull or query ending. */
const COMMAND_TIMEOUT_MS = 10_000;
const START_TIMEOUT_MS = 10_000;
const RUN_TIMEOUT_MS = 15_000;

const NAMESPACE = `wcpull${process.pid}`;
const AGENT_URL = `http://127.0.0.1:${AGENT_PORT_DEFAULT}`;

/** The children's environment: the pull must find its agent by the probe alone. */
const CHILD_ENV = { ...process.env };
delete CHILD_ENV['WEIGHTCAST_AGENT'];

const children = new ChildRegistry();
/** Why this machine cannot run the test, if it cannot. */
let problem: string | undefined;
let namespaceCreated = false;
let disposeAbruptEnd: (() => void) | undefined;
let work: { path: string; cleanup: () => Promise<void> } | undefined;
let modelDir: string;
let manifestPath: string;
let hex: string;
let paths: string[];
let originUrl: string;

before(async () => {
  problem = await namespaceProblem();
  if (problem !== undefined) return;
  try {
    await run('ip', ['netns', 'add', NAMESPACE]);
  } catch (error) {
    problem = errorText(error);
    return;
  }
  namespaceCreated = true;
  // An abrupt end (Ctrl-C, an uncaught exception) still stops the children and removes the namespace.
  disposeAbruptEnd = onAbruptEnd(() => {
    children.killAllSync();
    try {
      execFileSync('ip', ['netns', 'delete', NAMESPACE], { timeout: COMMAND_TIMEOUT_MS, stdio: 'ignore' });
    } catch {
      // Nothing more can be done while the process ends; the namespace's name carries our pid.
    }
  });
  await run('ip', ['-n', NAMESPACE, 'link', 'set', 'lo', 'up']);

  work = await tempDir('pull-finds-agent');
  const fixture = await smallModelWithManifest(work.path);
  ({ modelDir, manifestPath, hex, paths } = fixture);
  await mkdir(join(work.path, 'pulls'));

  const origin = await startService(['serve', modelDir, '--port', '0'], /^\{"url":"(.+)"\}$/, 'the origin');
  originUrl = origin.match[1] ?? '';
});

after(async () => {
  await children.stopAll(2000);
  try {
    if (namespaceCreated) await run('ip', ['netns', 'delete', NAMESPACE]);
    namespaceCreated = false;
  } finally {
    disposeAbruptEnd?.();
    await work?.cleanup();
  }
});

describe('weightcast pull probing the default agent port in a namespace of its own', () => {
  it('with nothing on the port, pulls from the origin itself and ends', async (t) => {
    if (skipped(t)) return;
    const dest = join(work!.path, 'pulls', 'nothing-there');
    const pull = await pullInto(dest);
    assertFromOrigin(pull, dest);
    assert.ok(await sameFiles(modelDir, dest, paths));
  });

  it('with a server on the port that is not an agent (a large page), pulls from the origin itself and ends', async (t) => {
    if (skipped(t)) return;
    // Another service on the agent's port, answering /healthz with a page larger than any agent's answer.
    const script =
      `require('node:http').createServer((req, res) => { console.log('request ' + req.url);` +
      ` res.writeHead(404, { 'content-type': 'text/html' }); res.end('<p>' + 'x'.repeat(1 << 20)); })` +
      `.listen(${AGENT_PORT_DEFAULT}, '127.0.0.1', () => console.log('ready'))`;
    const other = spawnIn([process.execPath, '-e', script]);
    try {
      await firstMatch(other, /^ready$/, START_TIMEOUT_MS, 'the other server');
      const asked = firstMatch(other, /^request (.*)$/, RUN_TIMEOUT_MS, 'the other server');
      asked.catch(() => undefined);
      const dest = join(work!.path, 'pulls', 'not-an-agent');
      const pull = await pullInto(dest);
      assert.equal((await asked)[1], '/healthz', 'the pull probed the default port');
      assertFromOrigin(pull, dest);
      assert.ok(await sameFiles(modelDir, dest, paths));
    } finally {
      await stopChild(other, 2000);
    }
  });

  it('with an agent on its default port, says it found it and the agent writes the files', async (t) => {
    if (skipped(t)) return;
    const scheduler = await startService(
      ['scheduler', '--port', '0'],
      /^weightcast scheduler listening on (\S+)$/,
      'the scheduler',
    );
    const agent = await startService(
      [
        'agent',
        '--scheduler',
        scheduler.match[1] ?? '',
        '--cache',
        join(work!.path, 'agent-cache'),
        '--destination-root',
        join(work!.path, 'pulls'),
      ],
      /^weightcast agent listening on (\S+)$/,
      'the agent',
    );
    try {
      assert.equal(agent.match[1], AGENT_URL, 'the agent listens on its default port');
      const dest = join(work!.path, 'pulls', 'through-agent');
      const pull = await pullInto(dest);
      assert.equal(pull.code, 0, pull.stderr);
      assert.ok(
        pull.stderr.includes(
          `weightcast: pulling through the agent at ${AGENT_URL} (found on this host; --no-agent to skip it)\n`,
        ),
        pull.stderr,
      );
      assert.match(pull.stdout, /^pulled 5 files, .* into .* through the swarm$/m);
      assert.match(pull.stdout, /\(by the agent\); every piece verified against the manifest$/m);
      assert.match(pull.stdout, /^the agent wrote the files here directly \(no copy\)$/m);
      assert.ok(await sameFiles(modelDir, dest, paths));

      // The agent's own account, from its local API: it fetched the model and wrote it at dest.
      const query =
        `fetch(process.argv[1], { signal: AbortSignal.timeout(${RUN_TIMEOUT_MS}) })` +
        `.then(async (res) => console.log(JSON.stringify({ status: res.status, body: await res.json() })))`;
      const answer = await runIn([process.execPath, '-e', query, `${AGENT_URL}/v1/local/models/${hex}`]);
      assert.equal(answer.code, 0, answer.stderr);
      const { status, body } = JSON.parse(answer.stdout) as {
        status: number;
        body: {
          complete?: boolean;
          filesDir?: string;
          filesAt?: string;
          totalBytes?: number;
          originBytes?: number;
        };
      };
      assert.equal(status, 200);
      assert.equal(body.complete, true);
      assert.equal(body.filesDir, dest);
      assert.equal(body.filesAt, 'destination');
      assert.equal(body.originBytes, body.totalBytes, 'the agent fetched the whole model from the origin');
    } finally {
      await stopChild(agent.child, 2000);
      await stopChild(scheduler.child, 2000);
    }
  });
});

function skipped(t: TestContext): boolean {
  if (problem === undefined) return false;
  t.skip(`needs root and ip netns: ${problem}`);
  return true;
}

interface Finished {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** `weightcast pull` of the model into `dest`, with no --agent: it decides for itself. */
function pullInto(dest: string): Promise<Finished> {
  return runIn([process.execPath, CLI, 'pull', originUrl, '--manifest', manifestPath, '--to', dest]);
}

function assertFromOrigin(pull: Finished, dest: string): void {
  assert.equal(pull.code, 0, pull.stderr);
  assert.ok(
    pull.stderr.includes(
      `weightcast: no agent answers at ${AGENT_URL} on this host; pulling from the origin directly (--agent URL or $WEIGHTCAST_AGENT for one elsewhere)\n`,
    ),
    pull.stderr,
  );
  assert.doesNotMatch(pull.stderr, /pulling through the agent/);
  assert.match(pull.stdout, new RegExp(`^pulled 5 files, .* into ${escape(dest)} in `, 'm'));
  assert.doesNotMatch(pull.stdout, /through the swarm|by the agent/);
}

/** Starts `weightcast ARGS` in the namespace and waits for the line saying it listens. */
async function startService(
  args: readonly string[],
  listening: RegExp,
  what: string,
): Promise<{ child: ChildProcess; match: RegExpExecArray }> {
  const child = spawnIn([process.execPath, CLI, ...args]);
  return { child, match: await firstMatch(child, listening, START_TIMEOUT_MS, what) };
}

/**
 * Runs `argv` in the namespace to its end, within RUN_TIMEOUT_MS: a run still going then is
 * stopped and fails the test (a pull that hangs on the probe would be caught here).
 */
async function runIn(argv: readonly string[]): Promise<Finished> {
  const child = spawnIn(argv);
  let stdout = '';
  let stderr = '';
  child.stdout?.on('data', (text: string) => (stdout += text));
  child.stderr?.on('data', (text: string) => (stderr += text));
  const closed = new Promise<number | null>((resolve) => {
    child.once('close', (code) => resolve(code));
    child.once('error', () => resolve(null));
  });
  const timeout = new AbortController();
  const expired = sleep(RUN_TIMEOUT_MS, 'expired' as const, { signal: timeout.signal }).catch(
    () => undefined,
  );
  try {
    const code = await Promise.race([closed, expired]);
    if (code === 'expired') {
      await stopChild(child, 2000);
      assert.fail(`${argv.slice(1).join(' ')} did not end within ${RUN_TIMEOUT_MS} ms: ${stderr}`);
    }
    return { code: code ?? null, stdout, stderr };
  } finally {
    timeout.abort();
  }
}

/** `ip netns exec` execs the command in place, so the PID tracked is the command's own. */
function spawnIn(argv: readonly string[]): ChildProcess {
  const child = spawn('ip', ['netns', 'exec', NAMESPACE, ...argv], { stdio: 'pipe', env: CHILD_ENV });
  children.track(child);
  return child;
}

async function namespaceProblem(): Promise<string | undefined> {
  if (process.platform !== 'linux') return `not Linux (${process.platform})`;
  if (process.getuid?.() !== 0) return 'not running as root';
  try {
    await run('ip', ['-V']);
  } catch (error) {
    return `no usable ip command: ${errorText(error)}`;
  }
  return undefined;
}

async function run(command: string, args: readonly string[]): Promise<void> {
  try {
    await execFileAsync(command, [...args], { timeout: COMMAND_TIMEOUT_MS, encoding: 'utf8' });
  } catch (error) {
    throw new Error(`${command} ${args.join(' ')}: ${errorText(error)}`, { cause: error });
  }
}

function errorText(error: unknown): string {
  if (!(error instanceof Error)) return String(error);
  const stderr = (error as { stderr?: unknown }).stderr;
  return typeof stderr === 'string' && stderr.trim() !== '' ? stderr.trim() : error.message;
}

function escape(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}
