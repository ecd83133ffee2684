/**
 * CPU accounting per benchmark leg with cgroup v2: every process of a leg (and whatever it forks)
 * runs in a cgroup of its own, and the leg's user and kernel CPU time is the difference of that
 * cgroup's `cpu.stat` between two readings. The cgroups live under one parent per run,
 * `<cgroup2 mount>/weightcast-fanout-<tag>/`, with a `services` leaf for long-running processes
 * between legs; `close` stops whatever is left in them (only processes this run put there) and
 * removes them.
 *
 * What the numbers hold: time the kernel charged to the leg's tasks, in user mode and in the kernel
 * (system calls, and the network stack's softirq work when it ran on the leg's task; this kernel has
 * no IRQ time accounting, so softirq time lands on whatever task was current). Softirq work done in
 * ksoftirqd, in timer context on an idle CPU or on another leg's task is not counted, nor is the
 * benchmark's own process.
 *
 * The parsing is pure and tested; the class does the file-system work.
 */

import { spawn } from 'node:child_process';
import { existsSync, readFileSync, rmdirSync, writeFileSync } from 'node:fs';
import { mkdir, readFile, rmdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

export interface CpuTimes {
  userSeconds: number;
  systemSeconds: number;
}

/** How long the cleanup after an abrupt end keeps trying to remove the run's cgroups. */
const LATE_REMOVAL_SECONDS = 10;
/** How long `close` waits for a cgroup's processes to be gone after killing them. */
const EMPTY_WAIT_MS = 5000;
const POLL_MS = 50;

/** The mount point of the cgroup v2 hierarchy from /proc/self/mounts text, or undefined. */
export function cgroup2Mount(mounts: string): string | undefined {
  for (const line of mounts.split('\n')) {
    const [, mountPoint, type] = line.split(' ');
    // Octal escapes (\040 for a space) are how mounts writes special characters in paths.
    if (type === 'cgroup2' && mountPoint !== undefined)
      return mountPoint.replace(/\\([0-7]{3})/g, (_, octal: string) =>
        String.fromCharCode(parseInt(octal, 8)),
      );
  }
  return undefined;
}

/** `user_usec` and `system_usec` of a cgroup's cpu.stat, in seconds; undefined when either is missing. */
export function parseCpuStat(text: string): CpuTimes | undefined {
  const field = (name: string): number | undefined => {
    const match = new RegExp(`^${name} (\\d+)$`, 'm').exec(text);
    return match?.[1] === undefined ? undefined : Number(match[1]);
  };
  const user = field('user_usec');
  const system = field('system_usec');
  if (user === undefined || system === undefined) return undefined;
  return { userSeconds: user / 1e6, systemSeconds: system / 1e6 };
}

export function cpuDifference(after: CpuTimes, before: CpuTimes): CpuTimes {
  return {
    userSeconds: after.userSeconds - before.userSeconds,
    systemSeconds: after.systemSeconds - before.systemSeconds,
  };
}

/** Why per-leg cgroups cannot be made here, or undefined when they can. */
export function cgroupProblem(): string | undefined {
  if (process.platform !== 'linux') return `not Linux (${process.platform})`;
  if (process.getuid?.() !== 0) return 'not running as root';
  let mounts: string;
  try {
    mounts = readFileSync('/proc/self/mounts', 'utf8');
  } catch (error) {
    return `cannot read /proc/self/mounts: ${error instanceof Error ? error.message : String(error)}`;
  }
  const mount = cgroup2Mount(mounts);
  if (mount === undefined) return 'no cgroup2 file system mounted';
  if (!existsSync(join(mount, 'cgroup.procs'))) return `${mount} has no cgroup.procs`;
  return undefined;
}

/** One leaf cgroup: a place to put processes and a CPU clock for them. */
export class Cgroup {
  readonly path: string;
  /** Nested cgroups (a leg's roles); `cpu.stat` of this one includes theirs. */
  readonly #children = new Map<string, Cgroup>();
  /** Nested cgroups being created: callers at once (eight agents starting) share one mkdir. */
  readonly #creating = new Map<string, Promise<Cgroup>>();

  constructor(path: string) {
    this.path = path;
  }

  /** The nested cgroup `name`, created on first use. */
  child(name: string): Promise<Cgroup> {
    const existing = this.#creating.get(name);
    if (existing !== undefined) return existing;
    const cgroup = new Cgroup(join(this.path, name));
    const created = mkdir(cgroup.path).then(() => {
      this.#children.set(name, cgroup);
      return cgroup;
    });
    this.#creating.set(name, created);
    return created;
  }

  get children(): ReadonlyMap<string, Cgroup> {
    return this.#children;
  }

  /** The file a PID is written to to move that process in. */
  get procsFile(): string {
    return join(this.path, 'cgroup.procs');
  }

  /** Moves a running process (one of ours) into this cgroup. */
  async adopt(pid: number): Promise<void> {
    await writeFile(this.procsFile, `${pid}\n`);
  }

  /** The same for child processes that have not exited. */
  async adoptChildren(
    children: readonly { pid?: number | undefined; exitCode: number | null }[],
  ): Promise<void> {
    for (const child of children) {
      if (child.pid !== undefined && child.exitCode === null) await this.adopt(child.pid);
    }
  }

  async cpu(): Promise<CpuTimes> {
    const times = parseCpuStat(await readFile(join(this.path, 'cpu.stat'), 'utf8'));
    if (times === undefined) throw new Error(`${this.path}/cpu.stat has no user_usec/system_usec`);
    return times;
  }

  async pids(): Promise<number[]> {
    const text = await readFile(this.procsFile, 'utf8').catch(() => '');
    return text
      .split('\n')
      .filter((line) => line !== '')
      .map(Number);
  }

  /** SIGKILL to every process still in the cgroup (all started by this run), then removes it. */
  async remove(): Promise<void> {
    if (!existsSync(this.path)) return;
    for (const child of this.#children.values()) await child.remove();
    this.#children.clear();
    this.#creating.clear();
    if ((await this.pids()).length > 0) {
      await writeFile(join(this.path, 'cgroup.kill'), '1\n').catch(async () => {
        // Kernels before 5.14 have no cgroup.kill: signal the members one by one.
        for (const pid of await this.pids()) {
          try {
            process.kill(pid, 'SIGKILL');
          } catch {
            // Gone already.
          }
        }
      });
    }
    // A killed process leaves cgroup.procs at its exit but keeps the cgroup busy until its parent
    // has reaped it (here, asynchronously): rmdir says EBUSY until then.
    for (let waited = 0; ; waited += POLL_MS) {
      try {
        await rmdir(this.path);
        return;
      } catch (error) {
        const busy = (error as { code?: unknown }).code === 'EBUSY';
        if (!busy || waited >= EMPTY_WAIT_MS) throw error;
      }
      await sleep(POLL_MS);
    }
  }

  #pidsSync(): string {
    try {
      return readFileSync(this.procsFile, 'utf8').trim();
    } catch {
      return '';
    }
  }

  /** The same for signal handlers, where nothing can be awaited (a bounded busy wait instead). */
  removeSync(): void {
    if (!existsSync(this.path)) return;
    for (const child of this.#children.values()) child.removeSync();
    this.#children.clear();
    this.#creating.clear();
    try {
      writeFileSync(join(this.path, 'cgroup.kill'), '1\n');
    } catch {
      // Nothing more can be done from a signal handler.
    }
    const pause = new Int32Array(new SharedArrayBuffer(4));
    for (let waited = 0; waited < EMPTY_WAIT_MS && this.#pidsSync() !== ''; waited += POLL_MS)
      Atomics.wait(pause, 0, 0, POLL_MS);
    try {
      rmdirSync(this.path);
    } catch {
      // Still busy for a moment; the name carries the run's tag.
    }
  }
}

/** The run's parent cgroup and its leaves. */
export class CgroupTree {
  readonly root: string;
  readonly #leaves = new Map<string, Cgroup>();

  private constructor(root: string) {
    this.root = root;
  }

  /** Creates `<cgroup2 mount>/weightcast-fanout-<tag>`; throws when `cgroupProblem()` would say why. */
  static async create(tag: string): Promise<CgroupTree> {
    const problem = cgroupProblem();
    if (problem !== undefined) throw new Error(problem);
    const mount = cgroup2Mount(readFileSync('/proc/self/mounts', 'utf8')) ?? '';
    const root = join(mount, `weightcast-fanout-${tag}`);
    await mkdir(root);
    return new CgroupTree(root);
  }

  /** A new leaf `name` (a leg or `services`). */
  async leaf(name: string): Promise<Cgroup> {
    if (this.#leaves.has(name)) throw new Error(`cgroup ${name} exists already`);
    const cgroup = new Cgroup(join(this.root, name));
    await mkdir(cgroup.path);
    this.#leaves.set(name, cgroup);
    return cgroup;
  }

  /** Kills what is left in `name` and removes it. */
  async removeLeaf(name: string): Promise<void> {
    const cgroup = this.#leaves.get(name);
    if (cgroup === undefined) return;
    await cgroup.remove();
    this.#leaves.delete(name);
  }

  async close(): Promise<void> {
    for (const name of [...this.#leaves.keys()]) await this.removeLeaf(name);
    if (existsSync(this.root)) await rmdir(this.root);
  }

  closeSync(): void {
    for (const cgroup of this.#leaves.values()) cgroup.removeSync();
    this.#leaves.clear();
    try {
      rmdirSync(this.root);
    } catch {
      // Killed processes keep their cgroups busy until they are reaped, which this process cannot
      // do from a signal handler: once it has exited, init reaps them and a short-lived shell
      // removes the directories (deepest first), giving up after LATE_REMOVAL_SECONDS.
      const script =
        `for attempt in $(seq ${LATE_REMOVAL_SECONDS * 10}); do ` +
        'find "$1" -depth -type d -exec rmdir {} + 2>/dev/null; [ -d "$1" ] || exit 0; sleep 0.1; done';
      try {
        spawn('sh', ['-c', script, 'cgroup-cleanup', this.root], { detached: true, stdio: 'ignore' }).unref();
      } catch {
        // The directories keep the run's tag; nothing more can be done here.
      }
    }
  }
}
