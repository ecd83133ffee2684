/**
 * `node dist/bench/agent-start.js [--runs N] [--mib M] [--cli PATH] [--join api|pull]`: how soon a
 * cold `weightcast agent` moves bytes. A scheduler (a child process) and an origin file server (in
 * this process, so it can stamp requests) are started and warmed first; then each run launches an
 * agent on a fresh cache and, as soon as it prints that it listens, joins it to a model: with
 * `--join api` (the default) this process posts the join itself, with `--join pull` a cold
 * `weightcast pull --agent` process does, as a user would. Recorded from the agent's launch:
 *  - listening: its `listening on` line arrived, and the CPU time the agent had used by then;
 *  - first piece: the origin received the agent's first ranged GET, and the CPU time the agent (and
 *    the pull) had used by then (from /proc, in ns where the kernel keeps schedstat; on a shared
 *    machine the CPU time is the steadier number);
 *  - complete: the agent's local API says the model is complete (with `--join pull`: the pull exited,
 *    the files copied out).
 * `--join pull-launch` starts the pull together with the agent (a job that starts both), the pull
 * finding it as a local agent (WEIGHTCAST_AGENT with the port the agent is given) and waiting for it
 * to listen.
 * The model is M MiB in 1 MiB pieces (default 16). `--cli` runs another build's bin/weightcast.js,
 * to compare, through the launcher beside it where that build has one (bin/weightcast), as a user
 * starts it. Where the environment sets NODE_EXTRA_CA_CERTS, the run says what it costs a Node
 * process that loads it at start (netns/node-start.ts); `--node-extra-ca-certs unset` runs without it. Set WEIGHTCAST_PROFILE_DIR for a CPU profile of every child.
 */

import { spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { readdirSync, readFileSync } from 'node:fs';
import { mkdir, mkdtemp, rm, truncate, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { buildManifest } from '../src/manifest/build.js';
import { encodeManifest, manifestDigest, writeManifest, type Manifest } from '../src/manifest/manifest.js';
import { merkleRoot } from '../src/manifest/merkle.js';
import { startFileServer } from '../src/origin/file-server.js';
import { LocalOrigin } from '../src/origin/local.js';
import { textTable } from '../src/util/text-table.js';
import {
  CLI,
  freePort,
  nodeCommand,
  profileNodeArgs,
  startProcess,
  stopProcess,
} from '../scripts/cluster.js';
import { BenchUsageError, flagNumber, readBenchArgs, removedOnAbruptEnd } from './bench-args.js';
import { applyNodeExtraCa, parseNodeExtraCa } from './netns/node-start.js';

const MiB = 1024 * 1024;
const COMPLETE_TIMEOUT_MS = 30_000;
/** USER_HZ: the unit of /proc's CPU times, 100 on every Linux build in common use. */
const CLOCK_TICKS_PER_SECOND = 100;

const USAGE =
  'usage: node dist/bench/agent-start.js [--runs N (5)] [--mib M (16, even)] [--cli PATH (this build)] [--join api|pull|pull-launch (api)] [--node-extra-ca-certs inherit|unset (inherit)] [--sparse-gib G --piece-kib K (a model of holes: the join and the first piece only; --join api)]';

const JOINED_BY = {
  api: 'its local API',
  pull: 'a cold pull --agent started once it listened',
  'pull-launch': 'a cold pull started with it (finding it as a local agent)',
} as const;

type Joiner = keyof typeof JOINED_BY;

const args = readBenchArgs('agent-start', USAGE, (argv) => {
  const { values } = parseArgs({
    args: argv,
    options: {
      runs: { type: 'string' },
      mib: { type: 'string' },
      cli: { type: 'string', default: CLI },
      join: { type: 'string', default: 'api' },
      'node-extra-ca-certs': { type: 'string', default: 'inherit' },
      'sparse-gib': { type: 'string' },
      'piece-kib': { type: 'string' },
    },
    strict: true,
  });
  if (!Object.hasOwn(JOINED_BY, values.join))
    throw new BenchUsageError(`--join must be api, pull or pull-launch, not "${values.join}"`);
  const mib = flagNumber(values.mib, '--mib', 16, { min: 2, max: 4096, integer: true });
  if (mib % 2 !== 0) throw new BenchUsageError(`--mib must be even (the model is two files), not ${mib}`);
  const sparseGib =
    values['sparse-gib'] === undefined
      ? undefined
      : flagNumber(values['sparse-gib'], '--sparse-gib', 1, { min: 1, max: 4096, integer: true });
  if (sparseGib !== undefined && values.join !== 'api')
    throw new BenchUsageError(
      '--sparse-gib measures the join and the first piece only: use it with --join api',
    );
  const pieceKib = flagNumber(values['piece-kib'], '--piece-kib', 1024, {
    min: 64,
    max: 65536,
    integer: true,
  });
  if ((pieceKib & (pieceKib - 1)) !== 0)
    throw new BenchUsageError(`--piece-kib must be a power of two, not ${pieceKib}`);
  return {
    runs: flagNumber(values.runs, '--runs', 5, { min: 1, max: 1000, integer: true }),
    mib,
    sparseGib,
    pieceBytes: pieceKib * 1024,
    cli: values.cli,
    joiner: values.join as Joiner,
    nodeExtraCa: parseNodeExtraCa(values['node-extra-ca-certs']),
  };
});
if (args === undefined) process.exit();
const { runs, mib, sparseGib, pieceBytes, cli, joiner, nodeExtraCa } = args;
// Said before the runs: what the environment's NODE_EXTRA_CA_CERTS costs each process they start.
const nodeStartNote = applyNodeExtraCa(nodeExtraCa);

const work = await mkdtemp(join(tmpdir(), 'weightcast-agent-start-'));
const disarmCleanup = removedOnAbruptEnd(work);
try {
  const modelDir = join(work, 'model');
  await mkdir(modelDir);
  const manifest =
    sparseGib === undefined
      ? await randomModel(modelDir, mib)
      : await sparseModel(modelDir, sparseGib * 1024 * MiB, pieceBytes);
  const hex = manifestDigest(manifest).slice('sha256:'.length);
  const manifestPath = join(work, 'manifest.json');
  await writeManifest(manifestPath, manifest);
  let agentPid: number | undefined;
  let pullPid: number | undefined;
  let firstPiece: { atMs: number; cpuMs: number; pullCpuMs: number } | undefined;
  const origin = await startFileServer({
    root: modelDir,
    faults: (request) => {
      if (request.range !== undefined && firstPiece === undefined) {
        firstPiece = { atMs: performance.now(), cpuMs: cpuMsOf(agentPid), pullCpuMs: cpuMsOf(pullPid) };
      }
      return undefined;
    },
  });
  const scheduler = await startProcess([cli, 'scheduler', '--port', '0'], /listening on (\S+)/, 'scheduler');
  const rows: string[][] = [];
  try {
    for (let run = 0; run < runs; run++) {
      firstPiece = undefined;
      let joinAnswered: number | undefined;
      // pull-launch: the pull starts with the agent, so it must know the agent's port beforehand.
      const port = joiner === 'pull-launch' ? await freePort() : 0;
      const launched = performance.now();
      const together =
        joiner === 'pull-launch'
          ? runPull(
              [cli, 'pull', origin.url, '--to', join(work, `pulled-${run}`), '--manifest', manifestPath],
              (pid) => (pullPid = pid),
              // Found as `weightcast pull` finds a local agent: WEIGHTCAST_AGENT, here with its port.
              { WEIGHTCAST_AGENT: `http://127.0.0.1:${port}` },
            )
          : undefined;
      // Awaited once the agent listens; a pull that fails before then is not an unhandled rejection.
      together?.catch(() => undefined);
      const agent = await startProcess(
        [
          cli,
          'agent',
          '--scheduler',
          scheduler.url,
          '--cache',
          join(work, `cache-${run}`),
          '--port',
          String(port),
        ],
        /listening on (\S+)/,
        'agent',
      );
      agentPid = agent.child.pid;
      try {
        const listening = performance.now() - launched;
        const listeningCpuMs = cpuMsOf(agentPid);
        if (together !== undefined) {
          await together;
        } else if (joiner === 'pull') {
          const to = join(work, `pulled-${run}`);
          await runPull(
            [cli, 'pull', origin.url, '--to', to, '--manifest', manifestPath, '--agent', agent.url],
            (pid) => (pullPid = pid),
          );
        } else if (sparseGib !== undefined) {
          await joinByApi(agent.url, origin.url, manifest, hex, false);
          joinAnswered = performance.now() - launched;
          // A model of holes: what it costs to join, and to its first piece, not the whole model.
          for (let waited = 0; firstPiece === undefined && waited < COMPLETE_TIMEOUT_MS; waited += 10)
            await new Promise((resolve) => setTimeout(resolve, 10));
        } else {
          await joinByApi(agent.url, origin.url, manifest, hex);
        }
        // A sparse model's last column is when the agent answered the join; else when it was done.
        const completed = joinAnswered ?? performance.now() - launched;
        const first = firstPiece ?? { atMs: NaN, cpuMs: NaN, pullCpuMs: NaN };
        rows.push([
          String(run + 1),
          ms(listening),
          ms(listeningCpuMs),
          ms(first.atMs - launched),
          ms(first.cpuMs),
          ...(joiner !== 'api' ? [ms(first.pullCpuMs)] : []),
          ms(completed),
        ]);
      } finally {
        await stopProcess(agent);
      }
    }
  } finally {
    await stopProcess(scheduler);
    await origin.close();
  }
  const median = (column: number): string => {
    const sorted = rows.map((row) => Number(row[column])).sort((a, b) => a - b);
    return ms(sorted[Math.floor((sorted.length - 1) / 2)] ?? NaN);
  };
  const pieces = manifest.files.reduce((sum, file) => sum + file.pieces.length, 0);
  const modelLabel =
    sparseGib === undefined
      ? `${mib} MiB in 1 MiB pieces`
      : `a sparse ${sparseGib} GiB model in ${pieceBytes / 1024} KiB pieces (${pieces} pieces; the run ends at its first piece)`;
  const header = ['run', 'listening', 'agent CPU by then', 'first piece', 'agent CPU by then'];
  if (joiner !== 'api') header.push('pull CPU by then');
  header.push(sparseGib === undefined ? 'complete' : 'join answered');
  rows.push(['median', ...header.slice(1).map((_, index) => median(index + 1))]);
  if (nodeStartNote !== undefined) process.stdout.write(`${nodeStartNote}\n`);
  process.stdout.write(
    `cold agent, ${modelLabel}, joined by ${JOINED_BY[joiner]}; ms from the agent's launch\n` +
      textTable(header, rows, header.map((_, index) => index).slice(1)).join('\n') +
      '\n',
  );
} finally {
  await rm(work, { recursive: true, force: true });
  disarmCleanup();
}

/** Two files of random bytes, `mib` MiB in all, and their manifest in 1 MiB pieces. */
async function randomModel(modelDir: string, mib: number): Promise<Manifest> {
  for (let file = 0; file < 2; file++) {
    await writeFile(join(modelDir, `part-${file}.bin`), randomBytes((mib / 2) * MiB));
  }
  return buildManifest(new LocalOrigin(modelDir), { pieceSize: MiB });
}

/**
 * Two sparse files, `bytes` in all, holding nothing (zeros read back), and their manifest: every
 * piece is the same zeros, so the digests are one hash and no byte is read to build it. For the
 * per-piece costs of a join at scale (65,536 pieces: 32 GiB in 512 KiB pieces) without the disk.
 */
async function sparseModel(modelDir: string, bytes: number, pieceSize: number): Promise<Manifest> {
  const fileSize = bytes / 2;
  const pieceDigest = createHash('sha256').update(Buffer.alloc(pieceSize)).digest('hex');
  const files = [];
  for (let file = 0; file < 2; file++) {
    const path = `part-${file}.bin`;
    await truncate(join(modelDir, path), fileSize).catch(async () => {
      await writeFile(join(modelDir, path), '');
      await truncate(join(modelDir, path), fileSize);
    });
    const pieces = new Array<string>(Math.ceil(fileSize / pieceSize)).fill(pieceDigest);
    files.push({ path, size: fileSize, merkleRoot: merkleRoot(pieces), pieces });
  }
  return { pieceSize, files };
}

/** Posts the join to the agent's local API and waits until the agent holds the model (or not: `wait`). */
async function joinByApi(
  agentUrl: string,
  source: string,
  manifest: Manifest,
  hex: string,
  wait = true,
): Promise<void> {
  const joined = await fetch(`${agentUrl}/v1/local/models`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ source, manifest: encodeManifest(manifest).toString('utf8') }),
    signal: AbortSignal.timeout(COMPLETE_TIMEOUT_MS),
  });
  if (!joined.ok) throw new Error(`join refused: ${joined.status} ${await joined.text()}`);
  await joined.arrayBuffer();
  if (!wait) return;
  const status = await fetch(`${agentUrl}/v1/local/models/${hex}?waitCompleteMs=${COMPLETE_TIMEOUT_MS}`, {
    signal: AbortSignal.timeout(COMPLETE_TIMEOUT_MS + 5000),
  });
  const { complete } = (await status.json()) as { complete: boolean };
  if (!complete) throw new Error(`not complete after ${COMPLETE_TIMEOUT_MS} ms`);
}

/** Runs `node argv...` (nodeCommand: a weightcast command through its launcher) to its end (bounded in time); throws unless it exits with 0. */
async function runPull(
  argv: readonly string[],
  onSpawn: (pid: number | undefined) => void,
  env: Record<string, string> = {},
): Promise<void> {
  const command = nodeCommand(argv, profileNodeArgs(), { ...process.env, ...env });
  const child = spawn(command.file, command.args, {
    stdio: ['ignore', 'ignore', 'pipe'],
    timeout: COMPLETE_TIMEOUT_MS,
    env: command.env,
  });
  onSpawn(child.pid);
  let stderr = '';
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString('utf8')));
  const [code] = (await once(child, 'exit')) as [number | null];
  if (code !== 0) throw new Error(`pull exited with ${code}: ${stderr}`);
}

/**
 * CPU time a process has used so far, in ms; NaN where /proc cannot say. The run time of each of its
 * threads in ns (/proc/PID/task/TID/schedstat) where the kernel keeps it, else user + system from
 * /proc/PID/stat, which counts in 10 ms ticks: too coarse for a start of ~100 ms.
 */
function cpuMsOf(pid: number | undefined): number {
  if (pid === undefined) return NaN;
  try {
    let ns = 0;
    for (const task of readdirSync(`/proc/${pid}/task`))
      ns += Number(readFileSync(`/proc/${pid}/task/${task}/schedstat`, 'utf8').split(' ')[0]);
    if (Number.isFinite(ns) && ns > 0) return ns / 1e6;
  } catch {
    // No schedstat here (or the process is gone): the coarser count below.
  }
  try {
    // Fields 14 and 15 of /proc/PID/stat, counted after the command name's closing parenthesis.
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    const ticks = Number(fields[11]) + Number(fields[12]);
    return (ticks * 1000) / CLOCK_TICKS_PER_SECOND;
  } catch {
    return NaN;
  }
}

function ms(value: number): string {
  return value.toFixed(0);
}
