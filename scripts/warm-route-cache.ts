/**
 * `node dist/scripts/warm-route-cache.js`, the last step of `npm run build`: runs `agent` and `pull`
 * once, on loopback, so that each route script's V8 code cache (src/cli/route-cache.ts) exists from
 * the build on, as a Python package's compiled files exist from its install. Without this step the
 * first `agent` and the first `pull` after a build compile their route and write the cache as they
 * end; a host that starts from a fresh copy of the build every time (a container) would never have one.
 *
 * What runs: a scheduler, an agent with a cache in a temporary directory, and a pull of a 2 MiB model
 * from a local directory through that agent, then the agent stopped as Ctrl-C stops it. The cache
 * holds what those runs compiled: the agent's start, its join, its transfers and its end; the pull's.
 * Each process's start is bounded by the harness's start timeout (scripts/cluster.ts) and the pull
 * by PULL_TIMEOUT_MS; everything is removed after. It never fails the build: a machine
 * where it cannot run (no loopback, a read-only dist) says so and builds as before.
 */

import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { buildManifest } from '../src/manifest/build.js';
import { writeManifest } from '../src/manifest/manifest.js';
import { LocalOrigin } from '../src/origin/local.js';
import { CLI, startProcess, stopProcess, type Proc } from './cluster.js';

const ROUTE_DIR = fileURLToPath(new URL('../src/cli/route/', import.meta.url));
const PULL_TIMEOUT_MS = 30_000;
const MiB = 1024 * 1024;

async function warm(): Promise<void> {
  const work = await mkdtemp(join(tmpdir(), 'weightcast-warm-'));
  let scheduler: Proc | undefined;
  let agent: Proc | undefined;
  try {
    const model = join(work, 'model');
    await mkdir(model);
    // Bytes that do not repeat within a piece: a model, as far as the code it runs is concerned.
    const bytes = Buffer.alloc(2 * MiB);
    for (let i = 0; i < bytes.length; i += 4) bytes.writeUInt32LE((i * 2654435761) >>> 0, i);
    await writeFile(join(model, 'weights.bin'), bytes);
    const manifestPath = join(work, 'manifest.json');
    await writeManifest(manifestPath, await buildManifest(new LocalOrigin(model), { pieceSize: MiB / 2 }));
    scheduler = await startProcess([CLI, 'scheduler', '--port', '0'], /listening on (\S+)/, 'scheduler');
    agent = await startProcess(
      [CLI, 'agent', '--scheduler', scheduler.url, '--cache', join(work, 'cache'), '--port', '0'],
      /listening on (\S+)/,
      'agent',
    );
    await promisify(execFile)(
      process.execPath,
      [CLI, 'pull', model, '--to', join(work, 'pulled'), '--manifest', manifestPath, '--agent', agent.url],
      { timeout: PULL_TIMEOUT_MS },
    );
  } finally {
    await stopProcess(agent, 'SIGINT');
    await stopProcess(scheduler);
    await rm(work, { recursive: true, force: true });
  }
}

if (existsSync(join(ROUTE_DIR, 'agent.cjs')) && process.env['WEIGHTCAST_WARM_ROUTES'] !== '0') {
  try {
    await warm();
  } catch (error) {
    process.stderr.write(
      `weightcast build: the route scripts' code cache was not written now (${(error as Error).message.split('\n')[0]}); the first agent and pull write it\n`,
    );
  }
}
