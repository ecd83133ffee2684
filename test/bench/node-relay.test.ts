/**
 * The node-chain leg's relay (bench/node-relay.ts) on loopback, started by the leg's own command
 * lines (bench/netns/commands.ts): real processes, an origin and two hosts in a chain. Every host ends with the model's files byte-identical, and a host whose bytes do
 * not match the manifest says so and exits 1 instead of claiming the copy.
 */

import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { cp, readFile, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import {
  NODE_CHAIN_RECEIVED_LINE,
  nodeChainHostArgv,
  nodeChainOriginArgv,
  storeRingHostArgv,
  storeRingOriginArgv,
} from '../../bench/netns/commands.js';
import { freePort, sameFiles, smallModelWithManifest, tempDir } from '../helpers/fixtures.js';

const BENCH = join(resolve(fileURLToPath(import.meta.url), '../../..'), 'bench');
const RELAY = join(BENCH, 'node-relay.js');
const RING_RELAY = join(BENCH, 'ring-relay.js');
const EXIT_WAIT_MS = 30_000;

let work: { path: string; cleanup: () => Promise<void> };
let model: Awaited<ReturnType<typeof smallModelWithManifest>>;

before(async () => {
  work = await tempDir('node-relay');
  model = await smallModelWithManifest(work.path);
});

after(() => work.cleanup());

interface Ran {
  code: number | null;
  stdout: string;
  stderr: string;
}

function start(argv: string[]): { child: ChildProcess; done: Promise<Ran> } {
  const [command = process.execPath, ...args] = argv;
  const child = spawn(command, args, { stdio: ['pipe', 'pipe', 'pipe'] });
  // A process that ended before its stdin was written to is told by its exit, not by EPIPE here.
  child.stdin?.on('error', () => undefined);
  let stdout = '';
  let stderr = '';
  child.stdout?.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
  child.stderr?.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const done = new Promise<Ran>((resolveRun, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`${args.join(' ')} did not exit: ${stderr}`));
    }, EXIT_WAIT_MS);
    child.once('exit', (code) => {
      clearTimeout(timer);
      resolveRun({ code, stdout, stderr });
    });
  });
  return { child, done };
}

/** Waits for the origin's `ready` (every host connected), then starts its clock. */
async function releaseWhenReady(origin: ChildProcess): Promise<void> {
  let said = '';
  for await (const chunk of origin.stdout as AsyncIterable<Buffer>) {
    said += chunk.toString();
    if (said.includes('ready\n')) break;
  }
  origin.stdin?.end('go\n');
}

/** A copy of the model with one byte changed in the second piece of a file of several. */
async function damagedCopy(label: string): Promise<string> {
  const damaged = join(work.path, label);
  await cp(model.modelDir, damaged, { recursive: true });
  const file = model.manifest.files.find((candidate) => candidate.pieces.length > 1);
  assert.ok(file !== undefined);
  const bytes = await readFile(join(damaged, file.path));
  bytes[model.manifest.pieceSize + 5] = (bytes[model.manifest.pieceSize + 5] ?? 0) ^ 0xff;
  await writeFile(join(damaged, file.path), bytes);
  return damaged;
}

/** origin (serving `originDir`) -> host1 -> host2 on loopback; the three processes' ends. */
async function chain(
  originDir: string,
  label: string,
  store: boolean,
): Promise<{ runs: Ran[]; dirs: string[] }> {
  const { manifestPath } = model;
  const [originPort, firstPort] = [await freePort(), await freePort()];
  const dirs = [join(work.path, `${label}-1`), join(work.path, `${label}-2`)];
  // The leg's own command lines, on loopback ports.
  const common = { node: process.execPath, relay: RELAY, manifestPath, store };
  const origin = start(
    nodeChainOriginArgv({
      node: process.execPath,
      relay: RELAY,
      manifestPath,
      modelDir: originDir,
      address: '127.0.0.1',
      port: originPort,
    }),
  );
  const first = start(
    nodeChainHostArgv({
      ...common,
      dir: dirs[0] ?? '',
      upstreamAddress: '127.0.0.1',
      upstreamPort: originPort,
      listenAddress: '127.0.0.1',
      listenPort: firstPort,
    }),
  );
  const second = start(
    nodeChainHostArgv({
      ...common,
      dir: dirs[1] ?? '',
      upstreamAddress: '127.0.0.1',
      upstreamPort: firstPort,
      listenAddress: undefined,
    }),
  );
  // The origin says ready once host1 is connected, which host1 is only once host2 is connected to it.
  await releaseWhenReady(origin.child);
  const runs = await Promise.all([origin.done, first.done, second.done]);
  return { runs, dirs };
}

for (const store of [false, true])
  describe(
    store ? 'the store-chain relay (--store: pieces kept as an agent keeps them)' : 'the node-chain relay',
    () => {
      it('takes every host a byte-identical copy, verified piece by piece', async () => {
        const { runs, dirs } = await chain(model.modelDir, `ok-${store}`, store);
        for (const run of runs) assert.equal(run.code, 0, run.stderr);
        for (const run of runs.slice(1)) assert.equal(run.stdout.trim(), NODE_CHAIN_RECEIVED_LINE);
        for (const dir of dirs) assert.ok(await sameFiles(model.modelDir, dir, model.paths), dir);
      });

      it('a host whose bytes do not match the manifest exits 1 and does not say it received the model', async () => {
        // The origin serves a copy with one byte changed in the second piece of a file of several.
        const damaged = await damagedCopy(`damaged-${store}`);
        const { runs } = await chain(damaged, `wrong-${store}`, store);
        const [, first, second] = runs;
        assert.equal(first?.code, 1, JSON.stringify(runs));
        assert.match(first?.stderr ?? '', /1 of \d+ pieces do not match the manifest/);
        // host2 finds the same piece wrong, or loses its upstream first: either way no copy is claimed.
        assert.equal(second?.code, 1);
        for (const run of runs.slice(1)) assert.doesNotMatch(run.stdout, /received/);
      });
    },
  );

/** The store-ring on loopback: an origin and `hosts` relays in a ring; the processes' ends. */
async function ring(
  originDir: string,
  label: string,
  hosts: number,
): Promise<{ runs: Ran[]; dirs: string[] }> {
  const { manifestPath } = model;
  const originPort = await freePort();
  const ports = await Promise.all(Array.from({ length: hosts }, () => freePort()));
  const dirs = ports.map((_, index) => join(work.path, `${label}-${index}`));
  const common = { node: process.execPath, relay: RING_RELAY, manifestPath, hosts };
  const origin = start(
    storeRingOriginArgv({ ...common, modelDir: originDir, address: '127.0.0.1', port: originPort }),
  );
  const relays = dirs.map((dir, index) =>
    start(
      storeRingHostArgv({
        ...common,
        dir,
        index,
        origin: `127.0.0.1:${originPort}`,
        upstream: `127.0.0.1:${ports[(index + hosts - 1) % hosts] ?? 0}`,
        listen: `127.0.0.1:${ports[index] ?? 0}`,
      }),
    ),
  );
  await releaseWhenReady(origin.child);
  const runs = await Promise.all([origin.done, ...relays.map((relay) => relay.done)]);
  return { runs, dirs };
}

describe('the store-ring relay (bench/ring-relay.ts)', () => {
  it('takes every host a byte-identical copy: its own pieces from the origin, the rest around the ring', async () => {
    const { runs, dirs } = await ring(model.modelDir, 'ring', 3);
    for (const run of runs) assert.equal(run.code, 0, run.stderr);
    for (const run of runs.slice(1)) assert.equal(run.stdout.trim(), NODE_CHAIN_RECEIVED_LINE);
    for (const dir of dirs) assert.ok(await sameFiles(model.modelDir, dir, model.paths), dir);
  });

  it('a piece that does not match the manifest stops the host it enters at, and no host claims the copy', async () => {
    const damaged = await damagedCopy('damaged-ring');
    const { runs } = await ring(damaged, 'ring-wrong', 3);
    const relays = runs.slice(1);
    assert.ok(
      relays.some((run) => run.code === 1 && /do not match the manifest/.test(run.stderr)),
      JSON.stringify(relays),
    );
    for (const run of relays) {
      assert.equal(run.code, 1, run.stderr);
      assert.doesNotMatch(run.stdout, /received/);
    }
  });
});
