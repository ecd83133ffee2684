/**
 * A swarm on loopback made of real processes: an origin file server (with an upload cap), a
 * scheduler and N agents (with their own upload/download caps), each a `node` child started by PID
 * and stopped by PID. The demo, the loopback fan-out benchmark and the multi-process tests all use
 * it. Every wait here is bounded in time.
 */

import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { createServer, type AddressInfo } from 'node:net';
import { existsSync } from 'node:fs';
import { basename, join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { encodeManifest, manifestDigest, type Manifest } from '../src/manifest/manifest.js';
import type { ModelStatus } from '../src/swarm/agent/agent.js';

const ROOT = resolve(fileURLToPath(import.meta.url), '../../..');
/** The CLI's Node entry (`node CLI args...`). */
export const CLI = join(ROOT, 'bin', 'weightcast.js');
/** The `weightcast` command as a user runs it: the launcher in front of CLI (bin/weightcast). */
export const WEIGHTCAST = join(ROOT, 'bin', 'weightcast');
const FILE_SERVER = join(ROOT, 'dist', 'src', 'origin', 'file-server-main.js');
const START_TIMEOUT_MS = 15_000;

export interface ClusterOptions {
  modelDir: string;
  manifest: Manifest;
  /** Work directory: agent caches go in `<workDir>/agent-<i>`. */
  workDir: string;
  hosts: number;
  /** Per-agent upload and download cap; undefined = none. */
  hostMbps?: number;
  /** The origin's upload cap; undefined = none. */
  originMbps?: number;
  originReaders?: number;
  /** Pieces per transfer unit (the scheduler's `--transfer-unit`); undefined: its own choice. */
  transferUnit?: number;
  /** Agents (by index) that serve corrupted bytes on purpose. */
  corruptAgents?: readonly number[];
  /** More flags for every `weightcast agent`. */
  agentArgs?: readonly string[];
  /** More flags for `weightcast scheduler` (for example `--ring-push`). */
  schedulerArgs?: readonly string[];
  /** Each agent's rack label (`--rack`), by index; none where undefined. */
  racks?: readonly (string | undefined)[];
  hostTimeoutMs?: number;
  /** Extra lines from the children, for debugging. */
  log?: (line: string) => void;
}

export interface Proc {
  child: ChildProcess;
  url: string;
  lines: string[];
}

/** What an agent's local API says about a model (the agent's own type). */
export type AgentStatus = ModelStatus;

/** Set WEIGHTCAST_PROFILE_DIR to get a CPU profile of every child (node --cpu-prof) for `measure first`. */
export function profileNodeArgs(): string[] {
  const profile = process.env['WEIGHTCAST_PROFILE_DIR'];
  return profile === undefined || profile === '' ? [] : ['--cpu-prof', `--cpu-prof-dir=${profile}`];
}

/** A loopback port nothing listens on (taken, then freed): for "nobody answers" cases, or a port to give a process. */
export async function freePort(): Promise<number> {
  const probe = createServer();
  await new Promise<void>((resolve) => probe.listen(0, '127.0.0.1', resolve));
  const { port } = probe.address() as AddressInfo;
  await new Promise((resolve) => probe.close(resolve));
  return port;
}

/**
 * `env` as bin/weightcast hands it to node: NODE_EXTRA_CA_CERTS moved to WEIGHTCAST_EXTRA_CA_CERTS
 * (unless NODE_OPTIONS picks another root store). For starting `node FLAGS bin/weightcast.js` as the
 * launcher would: Node 20 refuses --cpu-prof in NODE_OPTIONS, so profiled runs cannot go through it.
 */
export function launcherEnv(env: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  const extra = env['NODE_EXTRA_CA_CERTS'];
  if (extra === undefined || extra === '' || /--use-(openssl|system)-ca/.test(env['NODE_OPTIONS'] ?? ''))
    return env;
  const moved: NodeJS.ProcessEnv = { ...env, WEIGHTCAST_EXTRA_CA_CERTS: extra };
  delete moved['NODE_EXTRA_CA_CERTS'];
  return moved;
}

/**
 * How to start `node argv...`: a command line beginning with a build's bin/weightcast.js goes through
 * the `weightcast` launcher beside it, as a user starts it; with node flags (profiles), as
 * `node flags... argv...` in the environment the launcher would give it. Anything else (a build
 * without a launcher too) runs as `node flags... argv...`.
 */
export function nodeCommand(
  argv: readonly string[],
  nodeFlags: readonly string[] = profileNodeArgs(),
  env: NodeJS.ProcessEnv = process.env,
): { file: string; args: string[]; env: NodeJS.ProcessEnv } {
  const entry = argv[0] ?? '';
  const launcher = entry.endsWith('.js') ? entry.slice(0, -'.js'.length) : '';
  const direct = { file: process.execPath, args: [...nodeFlags, ...argv] };
  if (basename(entry) !== 'weightcast.js' || !existsSync(launcher)) return { ...direct, env };
  if (nodeFlags.length > 0) return { ...direct, env: launcherEnv(env) };
  return { file: launcher, args: argv.slice(1), env };
}

/** Starts `node argv...` (nodeCommand) and resolves with its URL once it prints one matching `pattern`. */
export async function startProcess(
  argv: readonly string[],
  pattern: RegExp,
  name: string,
  log?: (line: string) => void,
): Promise<Proc> {
  const { file, args, env } = nodeCommand(argv);
  const child = spawn(file, args, { stdio: ['ignore', 'pipe', 'pipe'], env });
  const lines: string[] = [];
  const url = await new Promise<string>((resolveUrl, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`${name} did not start within ${START_TIMEOUT_MS} ms: ${lines.join(' | ')}`));
    }, START_TIMEOUT_MS);
    const onLine = (line: string): void => {
      lines.push(line);
      if (lines.length > 2000) lines.splice(0, 1000);
      log?.(`${name}: ${line}`);
      const match = pattern.exec(line);
      if (match !== null) {
        clearTimeout(timer);
        resolveUrl(match[1] as string);
      }
    };
    createInterface({ input: child.stdout as NodeJS.ReadableStream }).on('line', onLine);
    createInterface({ input: child.stderr as NodeJS.ReadableStream }).on('line', onLine);
    child.once('exit', (code, signal) => {
      clearTimeout(timer);
      reject(new Error(`${name} exited (${code ?? signal}) before it started: ${lines.join(' | ')}`));
    });
  });
  return { child, url, lines };
}

export async function stopProcess(proc: Proc | undefined, signal: NodeJS.Signals = 'SIGTERM'): Promise<void> {
  if (proc === undefined) return;
  const { child } = proc;
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = once(child, 'exit');
  // SIGINT lets a profiled child write its profile; the CLI treats it like SIGTERM.
  child.kill(process.env['WEIGHTCAST_PROFILE_DIR'] ? 'SIGINT' : signal);
  const timer = setTimeout(() => child.kill('SIGKILL'), 5000);
  await exited;
  clearTimeout(timer);
}

export class Cluster {
  origin!: Proc;
  scheduler!: Proc;
  readonly agents: Array<Proc | undefined> = [];
  readonly hex: string;
  private schedulerPort = 0;

  constructor(readonly options: ClusterOptions) {
    this.hex = manifestDigest(options.manifest).slice('sha256:'.length);
  }

  static async start(options: ClusterOptions): Promise<Cluster> {
    const cluster = new Cluster(options);
    try {
      cluster.origin = await startProcess(
        [
          FILE_SERVER,
          '--root',
          options.modelDir,
          ...(options.originMbps === undefined ? [] : ['--rate-mbps', String(options.originMbps)]),
        ],
        /"url":"([^"]+)"/,
        'origin',
        options.log,
      );
      await cluster.startScheduler();
      for (let i = 0; i < options.hosts; i++) await cluster.startAgent(i);
    } catch (error) {
      await cluster.close();
      throw error;
    }
    return cluster;
  }

  get originUrl(): string {
    return this.origin.url;
  }

  async startScheduler(): Promise<void> {
    const { options } = this;
    this.scheduler = await startProcess(
      [
        CLI,
        'scheduler',
        '--port',
        String(this.schedulerPort),
        ...(options.originReaders === undefined ? [] : ['--origin-readers', String(options.originReaders)]),
        ...(options.hostTimeoutMs === undefined ? [] : ['--host-timeout-ms', String(options.hostTimeoutMs)]),
        ...(options.transferUnit === undefined ? [] : ['--transfer-unit', String(options.transferUnit)]),
        ...(options.schedulerArgs ?? []),
      ],
      /listening on (\S+)/,
      'scheduler',
      options.log,
    );
    // A restarted scheduler comes back on the same port, where the agents look for it.
    this.schedulerPort = Number(new URL(this.scheduler.url).port);
  }

  async startAgent(index: number): Promise<Proc> {
    const { options } = this;
    const caps =
      options.hostMbps === undefined
        ? []
        : ['--upload-mbps', String(options.hostMbps), '--download-mbps', String(options.hostMbps)];
    const previous = this.agents[index];
    const port = previous === undefined ? 0 : Number(new URL(previous.url).port);
    const agent = await startProcess(
      [
        CLI,
        'agent',
        '--scheduler',
        this.scheduler.url,
        '--cache',
        join(options.workDir, `agent-${index}`),
        '--port',
        String(port),
        ...caps,
        ...(options.corruptAgents?.includes(index) === true ? ['--inject-corrupt-uploads'] : []),
        ...(options.agentArgs ?? []),
        ...(options.racks?.[index] === undefined ? [] : ['--rack', options.racks[index]]),
      ],
      /listening on (\S+)/,
      `agent-${index}`,
      options.log,
    );
    this.agents[index] = agent;
    return agent;
  }

  agentUrl(index: number): string {
    const agent = this.agents[index];
    if (agent === undefined) throw new Error(`agent ${index} is not running`);
    return agent.url;
  }

  cacheFilesDir(index: number): string {
    return join(this.options.workDir, `agent-${index}`, this.hex, 'files');
  }

  /** Asks agent `index` to fetch the model. */
  async join(index: number): Promise<AgentStatus> {
    const response = await fetch(`${this.agentUrl(index)}/v1/local/models`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        source: this.originUrl,
        manifest: encodeManifest(this.options.manifest).toString('utf8'),
      }),
      signal: AbortSignal.timeout(30_000),
    });
    if (!response.ok)
      throw new Error(`agent ${index} refused the join: ${response.status} ${await response.text()}`);
    return (await response.json()) as AgentStatus;
  }

  async status(index: number): Promise<AgentStatus> {
    const response = await fetch(`${this.agentUrl(index)}/v1/local/models/${this.hex}`, {
      signal: AbortSignal.timeout(10_000),
    });
    if (!response.ok) throw new Error(`agent ${index} status: ${response.status} ${await response.text()}`);
    return (await response.json()) as AgentStatus;
  }

  /**
   * Polls agent `index` (every 20 ms, 400 times at most) until it holds `pieces` pieces; returns its
   * last status, whether or not it got there (the caller asserts what it needs).
   */
  async untilHeld(index: number, pieces: number): Promise<AgentStatus> {
    let status = await this.status(index);
    for (let tries = 0; tries < 400 && status.held < pieces; tries++) {
      await sleep(20);
      status = await this.status(index);
    }
    return status;
  }

  async schedulerStatus(): Promise<{
    /** The swarm's transfer units (its pieces, one per unit, unless the scheduler groups them). */
    pieceCount: number;
    originBytesAssigned: number;
    /** Transfers the scheduler planned that were verified (ring pushes are not among them). */
    transfersVerified: number;
    /** Ring mode: members, fed now, cut. */
    ring?: { members: number; fed: number; cut: number };
    hosts: Array<{ name: string; demoted: boolean; banned: boolean; url: string }>;
  }> {
    // The scheduler and agents inherit this environment: a cluster token there is theirs too.
    const token = process.env['WEIGHTCAST_CLUSTER_TOKEN'];
    const response = await fetch(`${this.scheduler.url}/v1/swarms/${this.hex}`, {
      signal: AbortSignal.timeout(10_000),
      ...(token === undefined || token === '' ? {} : { headers: { authorization: `Bearer ${token}` } }),
    });
    if (!response.ok) throw new Error(`scheduler status: ${response.status} ${await response.text()}`);
    return (await response.json()) as {
      pieceCount: number;
      originBytesAssigned: number;
      transfersVerified: number;
      ring?: { members: number; fed: number; cut: number };
      hosts: Array<{ name: string; demoted: boolean; banned: boolean; url: string }>;
    };
  }

  /**
   * Polls the given agents until each is complete; returns each one's completion time in ms after
   * `startedMs` (performance.now() clock). Throws after `timeoutMs`.
   */
  async waitComplete(
    indices: readonly number[],
    startedMs: number,
    timeoutMs: number,
  ): Promise<Map<number, number>> {
    const done = new Map<number, number>();
    const deadline = performance.now() + timeoutMs;
    while (done.size < indices.length) {
      if (performance.now() > deadline) {
        const missing = indices.filter((i) => !done.has(i));
        const states = await Promise.all(missing.map((i) => this.status(i).catch((e: Error) => e.message)));
        throw new Error(
          `agents ${missing.join(',')} not complete after ${timeoutMs} ms: ${JSON.stringify(states)}`,
        );
      }
      await Promise.all(
        indices
          .filter((i) => !done.has(i))
          .map(async (i) => {
            const status = await this.status(i).catch(() => undefined);
            if (status?.complete === true) done.set(i, performance.now() - startedMs);
          }),
      );
      if (done.size < indices.length) await sleep(25);
    }
    return done;
  }

  async close(): Promise<void> {
    await Promise.all(this.agents.map((agent) => stopProcess(agent)));
    await stopProcess(this.scheduler);
    await stopProcess(this.origin);
  }
}
