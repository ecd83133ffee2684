/**
 * A disk that fails (EIO) stops the model with a typed IO error naming EIO, for a pull and for an
 * agent, instead of completing on bytes the disk never took or fetching the same pieces forever.
 *
 * The failing disk is real: a sparse file behind a loop device, formatted ext4 and mounted (root
 * only; skipped with a message otherwise). Once the directories a case needs exist, the file behind
 * the loop device is cut to the file system's first block group and the device told its new size.
 * The first group holds every bitmap, inode table and directory block (flex_bg packs them there);
 * regular files get their data blocks from the groups after it, past the device's new end, so every
 * write of file data fails in the block layer with EIO, as a dead region of a disk would: an O_DIRECT
 * write at once, a buffered one only when its pages are written back (a sync sees it). A
 * device-mapper `error` target would do the same, but the development VM's kernel has no
 * device-mapper; loop devices are everywhere.
 *
 * What each path does with the error: a pull syncs each file before its rename, so it learns of the
 * failure there; an agent writes its cache with O_DIRECT where it can, and syncs a file that took
 * buffered bytes before that file counts (src/piece/store.ts finishFile). A retried pull or a
 * second ask of the agent fails again rather than trusting its journal for bytes a sync lost.
 */

import assert from 'node:assert/strict';
import { execFile, type ExecFileOptions } from 'node:child_process';
import { mkdir, readdir, rm, rmdir, stat, truncate, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { CLI, startProcess, stopProcess, type AgentStatus, type Proc } from '../../scripts/cluster.js';
import { type Manifest } from '../../src/manifest/manifest.js';
import { startFileServer, type FileServer } from '../../src/origin/file-server.js';
import { startScheduler, type SchedulerServer } from '../../src/swarm/scheduler/scheduler-server.js';
import { tempDir, smallModelWithManifest } from '../helpers/fixtures.js';

/** Every command and child here is bounded by this. */
const COMMAND_TIMEOUT_MS = 30_000;

/** How a command ended: its exit code (null: killed or given up on) and its output. */
interface Exit {
  code: number | null;
  stdout: string;
  stderr: string;
}

/**
 * Runs `file args...`; resolves with how it ended, never rejects. A child the kernel holds in an
 * uninterruptible wait (an unmount stuck on writeback) outlives even SIGKILL: after the timeout and
 * a grace period it is given up on, unreferenced so that this process can still exit.
 */
function run(file: string, args: readonly string[], options: ExecFileOptions = {}): Promise<Exit> {
  return new Promise((resolve) => {
    const child = execFile(
      file,
      args,
      { ...options, timeout: COMMAND_TIMEOUT_MS },
      (error, stdout, stderr) => {
        clearTimeout(giveUp);
        const code = error === null ? 0 : typeof error.code === 'number' ? error.code : null;
        resolve({ code, stdout: String(stdout), stderr: String(stderr) });
      },
    );
    const giveUp = setTimeout(() => {
      child.unref();
      child.stdout?.destroy();
      child.stderr?.destroy();
      resolve({ code: null, stdout: '', stderr: `${file} ${args.join(' ')} did not end` });
    }, COMMAND_TIMEOUT_MS + 5_000);
  });
}

/** Runs a setup or cleanup command; rejects unless it exits 0. */
async function command(file: string, args: readonly string[]): Promise<string> {
  const exit = await run(file, args);
  if (exit.code !== 0) throw new Error(`${file} ${args.join(' ')}: exit ${exit.code}: ${exit.stderr}`);
  return exit.stdout;
}

/** `promise`, or a rejection after COMMAND_TIMEOUT_MS (a child stuck in the kernel never exits). */
function bounded<T>(promise: Promise<T>, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new Error(`${what} took over ${COMMAND_TIMEOUT_MS} ms`)),
      COMMAND_TIMEOUT_MS,
    );
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

/** Why these tests cannot run here, or false. */
async function whyNot(): Promise<string | false> {
  if (process.getuid?.() !== 0)
    return 'needs root to attach a loop device and mount it (a real failing disk)';
  // `losetup --find` names a free loop device without taking it: it fails where there are none.
  for (const [tool, args, what] of [
    ['mkfs.ext4', ['-V'], 'mkfs.ext4'],
    ['mount', ['--version'], 'mount'],
    ['losetup', ['--find'], 'losetup and a free loop device'],
  ] as const) {
    if ((await run(tool, args)).code !== 0) return `needs ${what}`;
  }
  return false;
}

const skip = await whyNot();
if (skip !== false) console.log(`# disk-error tests skipped: ${skip}`);

/** ext4's block and block group: 32 MiB groups, so a 128 MiB disk has three groups after the first. */
const BLOCK_BYTES = 4096;
const GROUP_BLOCKS = 8192;
const FIRST_GROUP_BYTES = BLOCK_BYTES * GROUP_BLOCKS;
const DISK_BYTES = 4 * FIRST_GROUP_BYTES;

/** A mounted ext4 file system on a loop device whose writes of file data can be made to fail. */
interface FailingDisk {
  /** Where it is mounted. */
  dir: string;
  /** From now on every write of file data to it fails with EIO. */
  fail(): Promise<void>;
  /**
   * Makes it work again, deletes what is on it, unmounts it, detaches the loop device and removes the
   * file behind it (once, whoever asks). Deleting first drops the pages that never reached the disk
   * without writing them back: an unmount syncs them, and one such sync here never ended.
   */
  remove(): Promise<void>;
}

const disks = new Set<FailingDisk>();

async function makeDisk(path: string): Promise<FailingDisk> {
  const image = `${path}.img`;
  const undo: Array<() => Promise<unknown>> = [];
  let removed: Promise<void> | undefined;
  const remove = (): Promise<void> => {
    removed ??= (async () => {
      const problems: string[] = [];
      for (const step of undo.reverse()) await step().catch((error: Error) => problems.push(error.message));
      disks.delete(disk);
      if (problems.length > 0) throw new Error(`cleaning up the disk at ${path}: ${problems.join('; ')}`);
    })();
    return removed;
  };
  let device = '';
  const resize = async (bytes: number): Promise<void> => {
    await truncate(image, bytes);
    await command('losetup', ['--set-capacity', device]);
  };
  const disk: FailingDisk = {
    dir: path,
    fail: async () => {
      // What is written so far goes to the disk while it works; then the disk ends after the first group.
      await command('sync', ['--file-system', path]);
      await resize(FIRST_GROUP_BYTES);
    },
    remove,
  };
  disks.add(disk);
  try {
    await writeFile(image, '');
    undo.push(() => rm(image, { force: true }));
    await truncate(image, DISK_BYTES);
    device = (await command('losetup', ['--find', '--show', image])).trim();
    undo.push(() => command('losetup', ['--detach', device]));
    // No journal and no lazy initialisation: nothing but the test's own files writes to the disk
    // later. -N keeps the inode table small, inside the first group with the rest.
    await command('mkfs.ext4', [
      '-q',
      '-b',
      String(BLOCK_BYTES),
      '-g',
      String(GROUP_BLOCKS),
      '-N',
      '1024',
      '-m',
      '0',
      '-O',
      '^has_journal',
      '-E',
      'nodiscard,lazy_itable_init=0',
      device,
    ]);
    await mkdir(path);
    undo.push(() => rmdir(path));
    // errors=continue: metadata that cannot be written back is logged, and the file system stays
    // writable, so what the product sees is the data writes' EIO, not EROFS.
    await command('mount', ['-o', 'errors=continue', device, path]);
    undo.push(() => command('umount', [path]));
    // Undone in reverse: the disk works again, then what is on it goes, then the unmount.
    undo.push(async () => {
      const entries = await readdir(path);
      await Promise.all(entries.map((entry) => rm(join(path, entry), { recursive: true, force: true })));
    });
    undo.push(() => resize(DISK_BYTES));
  } catch (error) {
    await remove().catch(() => undefined);
    throw error;
  }
  return disk;
}

let work: { path: string; cleanup: () => Promise<void> };
let manifest: Manifest;
let manifestPath: string;
let hex: string;
let origin: FileServer;
let scheduler: SchedulerServer;

before(async () => {
  work = await tempDir('disk-error');
  const fixture = await smallModelWithManifest(work.path);
  const { modelDir } = fixture;
  ({ manifest, manifestPath, hex } = fixture);
  origin = await startFileServer({ root: modelDir });
  scheduler = await startScheduler();
});

after(async () => {
  await origin.close();
  await scheduler.close();
  // A case that timed out may not have removed its disk yet.
  await Promise.all([...disks].map((disk) => disk.remove()));
  await work.cleanup();
});

/** `weightcast ARGS...` as a child process; resolves with how it exited. */
function weightcast(args: readonly string[], env: Record<string, string>): Promise<Exit> {
  return run(process.execPath, [CLI, ...args], { env: { ...process.env, ...env } });
}

function pullArgs(dest: string, ...more: string[]): string[] {
  return ['pull', origin.url, '--to', dest, '--manifest', manifestPath, ...more];
}

/** The pull failed as it should: exit 1, and the CLI's line names the IO code and EIO. */
function assertFailedWithEio(exit: Exit): void {
  assert.equal(exit.code, 1, `exit ${exit.code}; stdout: ${exit.stdout}; stderr: ${exit.stderr}`);
  assert.match(exit.stderr, /^weightcast: IO: .*\bEIO\b/m);
}

/** No file with bytes is under its final name in `dest` (the model's empty file is complete anywhere). */
async function assertNoFinalFiles(dest: string): Promise<void> {
  for (const file of manifest.files) {
    if (file.size === 0) continue;
    const found = await stat(join(dest, file.path)).catch(() => undefined);
    assert.equal(found, undefined, `${file.path} is under its final name in ${dest}`);
  }
}

const pieces = (): number => manifest.files.reduce((sum, file) => sum + file.pieces.length, 0);

/** Runs `attempt` and checks that it asked the origin for no more than twice the model's pieces. */
async function boundedRequests<T>(what: string, attempt: () => Promise<T>): Promise<T> {
  const before = origin.stats.requests;
  const result = await attempt();
  const requests = origin.stats.requests - before;
  assert.ok(requests <= 2 * pieces(), `${what}: ${requests} origin requests for ${pieces()} pieces`);
  return result;
}

/** Stops an agent this test started, by its PID; one stuck in the kernel is given up on, as in `run`. */
async function stopAgent(agent: Proc | undefined): Promise<void> {
  try {
    await bounded(stopProcess(agent), 'stopping the agent');
  } catch (error) {
    agent?.child.unref();
    agent?.child.stdout?.destroy();
    agent?.child.stderr?.destroy();
    throw error;
  }
}

async function agentStatus(agent: Proc): Promise<AgentStatus> {
  const response = await fetch(`${agent.url}/v1/local/models/${hex}`, {
    signal: AbortSignal.timeout(COMMAND_TIMEOUT_MS),
  });
  assert.equal(response.status, 200, await response.clone().text());
  return (await response.json()) as AgentStatus;
}

function startAgent(cache: string, ...more: string[]): Promise<Proc> {
  return startProcess(
    [CLI, 'agent', '--scheduler', scheduler.url, '--cache', cache, '--port', '0', ...more],
    /listening on (http:\/\/\S+)/,
    'agent',
  );
}

/**
 * Pulls through `agent` into `dest` `asks` times: each fails with IO naming EIO within bounded
 * origin requests, the agent's status says why the model stopped and its log said so, and no file is
 * under its final name. A second pull is the user asking again: the agent joins the model afresh
 * and must fail the same way, not complete from its journal.
 */
async function assertAgentStops(agent: Proc, dest: string, asks: number): Promise<void> {
  for (let ask = 1; ask <= asks; ask++) {
    const exit = await boundedRequests(`pull ${ask} through the agent`, () =>
      weightcast(pullArgs(dest), { WEIGHTCAST_AGENT: agent.url }),
    );
    assertFailedWithEio(exit);
    assert.match(exit.stderr, /IO: the agent at \S+: /);
    const status = await agentStatus(agent);
    assert.equal(status.complete, false);
    assert.equal(status.failed?.code, 'IO', JSON.stringify(status));
    assert.match(status.failed?.message ?? '', /\bEIO\b/);
    await assertNoFinalFiles(dest);
  }
  const stopped = agent.lines.filter((line) => /^model \w+: stopped: IO: .*\bEIO\b/.test(line));
  assert.equal(stopped.length, asks, agent.lines.join('\n'));
}

describe('a failing disk (EIO)', { skip, timeout: 60_000 }, () => {
  it('fails a pull into it with IO (EIO), with no file under its final name, and again when retried', async () => {
    const disk = await makeDisk(join(work.path, 'pull-disk'));
    try {
      const dest = join(disk.dir, 'model');
      await disk.fail();
      // Retried, a pull resumes from its journal: a file whose sync failed must not be trusted.
      for (let attempt = 1; attempt <= 3; attempt++) {
        const exit = await boundedRequests(`pull attempt ${attempt}`, () =>
          weightcast(pullArgs(dest), { WEIGHTCAST_AGENT: 'off' }),
        );
        assertFailedWithEio(exit);
        await assertNoFinalFiles(dest);
      }
    } finally {
      await disk.remove();
    }
  });

  it('fails pull --scheduler into it with IO (EIO), with no file under its final name', async () => {
    const disk = await makeDisk(join(work.path, 'scheduler-disk'));
    try {
      const dest = join(disk.dir, 'model');
      await disk.fail();
      const exit = await boundedRequests('pull --scheduler', () =>
        weightcast(pullArgs(dest, '--scheduler', scheduler.url), {}),
      );
      assertFailedWithEio(exit);
      await assertNoFinalFiles(dest);
    } finally {
      await disk.remove();
    }
  });

  it('stops the model in an agent whose cache is on it (O_DIRECT writes), and the pull through it', async () => {
    const disk = await makeDisk(join(work.path, 'cache-disk'));
    let agent: Proc | undefined;
    try {
      // Started while the disk works, the agent writes its cache with O_DIRECT: a piece's write fails.
      agent = await startAgent(join(disk.dir, 'cache'));
      await disk.fail();
      // Asked once: asked again, it would write where O_DIRECT writes failed, and ext4 answers
      // those with ENOMEM (the model stops all the same), not EIO.
      await assertAgentStops(agent, join(work.path, 'through-agent'), 1);
    } finally {
      await stopAgent(agent);
      await disk.remove();
    }
  });

  it('stops the model in an agent whose cache is on it (buffered writes), and the pull through it', async () => {
    const disk = await makeDisk(join(work.path, 'buffered-disk'));
    let agent: Proc | undefined;
    try {
      await disk.fail();
      // Every write goes through the page cache (as on a file system without O_DIRECT): the disk's
      // error comes only from a sync.
      agent = await startAgent(join(disk.dir, 'cache'), '--no-direct-io');
      await assertAgentStops(agent, join(work.path, 'through-buffered-agent'), 2);
    } finally {
      await stopAgent(agent);
      await disk.remove();
    }
  });

  it('stops the model in an agent writing into a destination root on it, and the pull through it', async () => {
    const disk = await makeDisk(join(work.path, 'root-disk'));
    let agent: Proc | undefined;
    try {
      const root = join(disk.dir, 'models');
      await mkdir(root);
      agent = await startAgent(join(work.path, 'root-cache'), '--destination-root', root);
      await disk.fail();
      // Its O_DIRECT writes into the destination fail; asked once, as in the cache case above.
      await assertAgentStops(agent, join(root, 'model'), 1);
    } finally {
      await stopAgent(agent);
      await disk.remove();
    }
  });
});
