/**
 * A network-namespace testbed for benchmarks: an origin, N hosts and a control machine (for the
 * scheduler), each in its own namespace, on
 * a private Linux bridge, with a `tc` token bucket on every link in both directions (see `plan.ts`
 * for the layout). Needs root and iproute2.
 *
 * `createTestbed` records every namespace and link as soon as it exists, so `close` (and the
 * handler it installs for SIGINT, SIGTERM, SIGHUP and an abrupt exit) deletes exactly what this run
 * created, even when creation failed half-way. Processes started with `spawnIn` are remembered by PID and are the only ones
 * `close` signals. `LoopbackHosts` offers the same surface on 127.0.0.1 for machines without netns.
 */

import { execFile, execFileSync, spawn, type ChildProcess, type SpawnOptions } from 'node:child_process';
import { randomInt } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { promisify } from 'node:util';
import { ChildRegistry, onAbruptEnd } from './children.js';
import { planTestbed, tbfArguments, testbedTag, type Endpoint, type TestbedPlan } from './plan.js';

const execFileAsync = promisify(execFile);

/** No single `ip` or `tc` call should take long; a stuck one fails the run instead of hanging it. */
const COMMAND_TIMEOUT_MS = 10_000;

/** What a benchmark needs from a set of hosts, whether namespaces or loopback. */
export interface HostSet {
  readonly mode: 'netns' | 'loopback';
  readonly origin: Endpoint;
  readonly hosts: readonly Endpoint[];
  /** Where control-plane services run (TestbedPlan.control). */
  readonly control: Endpoint;
  /** Starts `argv` inside the endpoint's namespace (loopback: as a plain child), stdio piped. */
  spawnIn(ns: string, argv: readonly string[], options?: SpawnOptions): ChildProcess;
  /**
   * Bytes the endpoint has sent so far: `eth0`'s TX counter in its namespace. Loopback has no
   * per-host interface; there it is the socket and pipe writes (`/proc/PID/io` wchar) of the
   * endpoint's live processes.
   */
  txBytes(ns: string): Promise<number>;
  /** PIDs of the processes started here that are still running. */
  livePids(): number[];
  /** Stops the processes started here (by PID) and removes everything created; idempotent. */
  close(): Promise<void>;
  /** The same without waiting, for signal handlers: SIGKILL instead of SIGTERM first. */
  closeSync(): void;
}

export interface TestbedOptions {
  hosts: number;
  hostMbps: number;
  originMbps: number;
  /** First three octets of the private /24 (default 10.77.0). */
  subnet?: string;
  /** Prefix of every name (default `wc<pid><letter>`). */
  tag?: string;
  /** Every link's MTU (default 1500; 9000 for jumbo frames). */
  mtu?: number;
}

/** Why netns testbeds cannot run here, or undefined when they can. Creates and deletes one namespace. */
/**
 * The port a service listens on: `fixed` in the namespaces (each host has its own address), else one
 * that was free a moment ago on 127.0.0.1 (loopback, where every service shares one address).
 */
export async function servicePort(hostSet: Pick<HostSet, 'mode'>, fixed: number): Promise<number> {
  if (hostSet.mode !== 'loopback') return fixed;
  const server = createServer();
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', resolve);
  });
  const address = server.address();
  await new Promise<void>((resolve) => server.close(() => resolve()));
  if (address === null || typeof address === 'string') throw new Error('no port from listen(0)');
  return address.port;
}

export async function netnsProblem(): Promise<string | undefined> {
  if (process.platform !== 'linux') return `not Linux (${process.platform})`;
  if (process.getuid?.() !== 0) return 'not running as root';
  const probe = `${testbedTag(process.pid, randomInt(26))}probe`;
  try {
    await run('tc', ['-V']);
    await run('ip', ['netns', 'add', probe]);
  } catch (error) {
    return `ip netns or tc unusable: ${errorText(error)}`;
  }
  try {
    await run('ip', ['netns', 'delete', probe]);
  } catch (error) {
    return `could not delete the probe namespace ${probe}: ${errorText(error)}`;
  }
  return undefined;
}

export async function createTestbed(options: TestbedOptions): Promise<Testbed> {
  const plan = planTestbed({
    tag: options.tag ?? testbedTag(process.pid, randomInt(26)),
    hosts: options.hosts,
    hostMbps: options.hostMbps,
    originMbps: options.originMbps,
    subnet: options.subnet ?? '10.77.0',
    ...(options.mtu === undefined ? {} : { mtu: options.mtu }),
  });
  const testbed = new Testbed(plan);
  try {
    await testbed.build();
    return testbed;
  } catch (error) {
    await testbed.close();
    throw error;
  }
}

export class Testbed implements HostSet {
  readonly mode = 'netns';
  readonly plan: TestbedPlan;
  readonly #children = new ChildRegistry();
  /** Namespaces and root-namespace links that exist because of us, in creation order. */
  readonly #namespaces: string[] = [];
  readonly #links: string[] = [];
  /** Set once `close` or `closeSync` has begun: no new processes from then on. */
  #closing = false;
  readonly #disposeAbruptEnd: () => void;

  constructor(plan: TestbedPlan) {
    this.plan = plan;
    // Kept until cleanup has finished, so a Ctrl-C during `close` still removes what is left.
    this.#disposeAbruptEnd = onAbruptEnd((reason) => {
      this.closeSync();
      process.stderr.write(`testbed ${plan.tag}: removed on ${reason}\n`);
    });
  }

  get origin(): Endpoint {
    return this.plan.origin;
  }

  get hosts(): readonly Endpoint[] {
    return this.plan.hosts;
  }

  get control(): Endpoint {
    return this.plan.control;
  }

  /** Every namespace and root-namespace link the testbed holds right now. */
  get created(): { namespaces: readonly string[]; links: readonly string[] } {
    return { namespaces: [...this.#namespaces], links: [...this.#links] };
  }

  async build(): Promise<void> {
    const { bridge } = this.plan;
    await run('ip', ['link', 'add', bridge, 'type', 'bridge']);
    this.#links.push(bridge);
    await run('ip', ['link', 'set', bridge, 'up']);
    for (const endpoint of [this.plan.origin, ...this.plan.hosts, this.plan.control])
      await this.#addEndpoint(endpoint);
  }

  async #addEndpoint(endpoint: Endpoint): Promise<void> {
    const { ns, bridgePort, peer, address, mbps } = endpoint;
    await run('ip', ['netns', 'add', ns]);
    this.#namespaces.push(ns);
    const mtu = String(this.plan.mtu);
    await run('ip', [
      'link',
      'add',
      bridgePort,
      'mtu',
      mtu,
      'type',
      'veth',
      'peer',
      'name',
      peer,
      'mtu',
      mtu,
    ]);
    this.#links.push(bridgePort);
    await run('ip', ['link', 'set', peer, 'netns', ns]);
    await run('ip', ['-n', ns, 'link', 'set', peer, 'name', 'eth0']);
    await run('ip', ['-n', ns, 'addr', 'add', `${address}/${this.plan.prefixLength}`, 'dev', 'eth0']);
    await run('ip', ['-n', ns, 'link', 'set', 'lo', 'up']);
    await run('ip', ['-n', ns, 'link', 'set', 'eth0', 'up']);
    await run('ip', ['link', 'set', bridgePort, 'master', this.plan.bridge, 'up']);
    await run('tc', ['-n', ns, 'qdisc', 'add', 'dev', 'eth0', 'root', ...tbfArguments(mbps)]);
    await run('tc', ['qdisc', 'add', 'dev', bridgePort, 'root', ...tbfArguments(mbps)]);
  }

  spawnIn(ns: string, argv: readonly string[], options: SpawnOptions = {}): ChildProcess {
    if (this.#closing) throw new Error('testbed is closed');
    if (!this.#namespaces.includes(ns)) throw new Error(`namespace ${ns} is not part of this testbed`);
    // `ip netns exec` execs the command in place, so the child's PID is the command's own.
    const child = spawn('ip', ['netns', 'exec', ns, ...argv], { stdio: 'pipe', ...options });
    return this.#children.track(child);
  }

  livePids(): number[] {
    return this.#children.pids();
  }

  async txBytes(ns: string): Promise<number> {
    const { stdout } = await run('ip', ['-n', ns, '-s', '-j', 'link', 'show', 'dev', 'eth0']);
    return parseTxBytes(stdout);
  }

  async close(): Promise<void> {
    if (this.#closing) return;
    this.#closing = true;
    await this.#children.stopAll();
    const problems: string[] = [];
    for (const ns of [...this.#namespaces].reverse()) {
      await run('ip', ['netns', 'delete', ns]).catch((e: unknown) => problems.push(errorText(e)));
      remove(this.#namespaces, ns);
    }
    // Deleting a namespace destroys its veth end, and with it the bridge port, but in the background:
    // a port may vanish between the check and the delete, which is what we wanted anyway.
    for (const link of [...this.#links].reverse()) {
      if (linkExists(link)) {
        await run('ip', ['link', 'delete', link]).catch((e: unknown) => {
          if (linkExists(link)) problems.push(errorText(e));
        });
      }
      remove(this.#links, link);
    }
    this.#disposeAbruptEnd();
    if (problems.length > 0) {
      throw new Error(`testbed ${this.plan.tag}: cleanup failed: ${problems.join('; ')}`);
    }
  }

  /** Also what runs on a signal or an abrupt exit, including in the middle of `close`. */
  closeSync(): void {
    this.#closing = true;
    this.#disposeAbruptEnd();
    this.#children.killAllSync();
    for (const ns of this.#namespaces.splice(0).reverse()) runSyncQuietly('ip', ['netns', 'delete', ns]);
    for (const link of this.#links.splice(0).reverse()) {
      if (linkExists(link)) runSyncQuietly('ip', ['link', 'delete', link]);
    }
  }
}

function remove(list: string[], item: string): void {
  const index = list.indexOf(item);
  if (index >= 0) list.splice(index, 1);
}

/** The same surface on 127.0.0.1: every endpoint is this machine, caps are up to the processes. */
export class LoopbackHosts implements HostSet {
  readonly mode = 'loopback';
  readonly origin: Endpoint;
  readonly hosts: readonly Endpoint[];
  readonly control: Endpoint;
  readonly #children = new ChildRegistry();
  readonly #byEndpoint = new Map<string, Set<ChildProcess>>();
  readonly #disposeAbruptEnd = onAbruptEnd(() => this.closeSync());

  constructor(hosts: number, hostMbps: number, originMbps: number) {
    const endpoint = (label: string, mbps: number): Endpoint => ({
      label,
      ns: label,
      bridgePort: '',
      peer: '',
      address: '127.0.0.1',
      mbps,
    });
    this.origin = endpoint('origin', originMbps);
    this.hosts = Array.from({ length: hosts }, (_, i) => endpoint(`host${i + 1}`, hostMbps));
    this.control = endpoint('control', hostMbps);
  }

  spawnIn(ns: string, argv: readonly string[], options: SpawnOptions = {}): ChildProcess {
    const [command, ...args] = argv;
    if (command === undefined) throw new Error('spawnIn: empty argv');
    const child = this.#children.track(spawn(command, args, { stdio: 'pipe', ...options }));
    const set = this.#byEndpoint.get(ns) ?? new Set<ChildProcess>();
    this.#byEndpoint.set(ns, set);
    set.add(child);
    child.once('exit', () => set.delete(child));
    return child;
  }

  livePids(): number[] {
    return this.#children.pids();
  }

  txBytes(ns: string): Promise<number> {
    let total = 0;
    for (const child of this.#byEndpoint.get(ns) ?? []) {
      if (child.pid !== undefined) total += writtenBytes(child.pid);
    }
    return Promise.resolve(total);
  }

  async close(): Promise<void> {
    await this.#children.stopAll();
    this.#disposeAbruptEnd();
  }

  closeSync(): void {
    this.#disposeAbruptEnd();
    this.#children.killAllSync();
  }
}

/** `tx.bytes` from `ip -s -j link show` output. */
export function parseTxBytes(json: string): number {
  const parsed = JSON.parse(json) as Array<{ stats64?: { tx?: { bytes?: unknown } } }>;
  const bytes = parsed[0]?.stats64?.tx?.bytes;
  if (typeof bytes !== 'number') throw new Error(`no tx bytes in ip -s -j output: ${json.slice(0, 200)}`);
  return bytes;
}

function writtenBytes(pid: number): number {
  try {
    const match = /^wchar:\s*(\d+)$/m.exec(readFileSync(`/proc/${pid}/io`, 'utf8'));
    return match === null ? 0 : Number(match[1]);
  } catch {
    return 0;
  }
}

function linkExists(name: string): boolean {
  return existsSync(`/sys/class/net/${name}`);
}

async function run(command: string, args: readonly string[]): Promise<{ stdout: string }> {
  try {
    const { stdout } = await execFileAsync(command, [...args], {
      timeout: COMMAND_TIMEOUT_MS,
      encoding: 'utf8',
    });
    return { stdout };
  } catch (error) {
    throw new Error(`${command} ${args.join(' ')}: ${errorText(error)}`, { cause: error });
  }
}

function runSyncQuietly(command: string, args: readonly string[]): void {
  try {
    execFileSync(command, [...args], { timeout: COMMAND_TIMEOUT_MS, stdio: 'ignore' });
  } catch {
    // A signal handler reports nothing more; whatever is left carries the testbed's tag.
  }
}

function errorText(error: unknown): string {
  if (error instanceof Error) {
    const stderr = (error as { stderr?: unknown }).stderr;
    return typeof stderr === 'string' && stderr.trim() !== '' ? stderr.trim() : error.message;
  }
  return String(error);
}
