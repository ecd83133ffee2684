/**
 * A pull does not write through a symbolic link inside its destination (issue 16, finding 7):
 * `DIR/sub -> elsewhere` with a model file `sub/x.bin` is refused with PULL_DESTINATION_SYMLINK
 * (exit 2), and nothing appears where the link points; the same for the agent writing into a
 * pull's destination. Real files and links in a temporary directory.
 */

import assert from 'node:assert/strict';
import { mkdir, readdir, readlink, symlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { memoryIo } from '../../src/cli/io.js';
import { runCli } from '../../src/cli/main.js';
import { isWeightcastError } from '../../src/errors.js';
import { buildManifest } from '../../src/manifest/build.js';
import { manifestDigest, writeManifest, type Manifest } from '../../src/manifest/manifest.js';
import { LocalOrigin } from '../../src/origin/local.js';
import { pull } from '../../src/pull/pull.js';
import { Agent } from '../../src/swarm/agent/agent.js';
import { startScheduler, type SchedulerServer } from '../../src/swarm/scheduler/scheduler-server.js';
import { deterministicBytes, tempDir } from '../helpers/fixtures.js';

let work: { path: string; cleanup: () => Promise<void> };
let source: string;
let manifest: Manifest;
let manifestPath: string;

before(async () => {
  work = await tempDir('symlink-dest');
  source = join(work.path, 'source');
  await mkdir(join(source, 'sub'), { recursive: true });
  await writeFile(join(source, 'top.bin'), deterministicBytes('top', 5000));
  await writeFile(join(source, 'sub', 'x.bin'), deterministicBytes('x', 3000));
  const origin = new LocalOrigin(source);
  manifest = await buildManifest(origin, { pieceSize: 256 * 1024 }).finally(() => origin.close());
  manifestPath = join(work.path, 'manifest.json');
  await writeManifest(manifestPath, manifest);
});

after(async () => {
  await work.cleanup();
});

/** A destination whose `link` (a model directory or the state directory) points outside it. */
async function trap(name: string, link: string): Promise<{ dest: string; outside: string }> {
  const dest = join(work.path, name);
  const outside = join(work.path, `${name}-outside`);
  await mkdir(dest, { recursive: true });
  await mkdir(outside, { recursive: true });
  await symlink(outside, join(dest, link));
  return { dest, outside };
}

describe('a symbolic link inside the destination', () => {
  /** A pull into a destination with `link` a symlink out of it is refused, writing nothing there. */
  async function refusedThrough(label: string, link: string): Promise<void> {
    const { dest, outside } = await trap(label, link);
    const origin = new LocalOrigin(source);
    const before = await openDescriptors();
    try {
      await assert.rejects(pull(origin, dest, { manifest }), (error: unknown) =>
        isWeightcastError(error, 'PULL_DESTINATION_SYMLINK'),
      );
    } finally {
      await origin.close();
    }
    assert.deepEqual(await readdir(outside), []);
    // Nothing the refused pull opened stays open (the partial files' direct handles leaked once).
    assert.deepEqual(await openDescriptors(), before);
  }

  /** This process's open descriptors and what they name (Linux); [] elsewhere. */
  async function openDescriptors(): Promise<string[]> {
    if (process.platform !== 'linux') return [];
    const names = await readdir('/proc/self/fd');
    const targets = await Promise.all(
      names.map((name) => readlink(`/proc/self/fd/${name}`).catch(() => 'gone')),
    );
    return targets.filter((target) => target.startsWith(work.path)).sort();
  }

  it('a model directory that is a link: refused, nothing written through it', async () => {
    await refusedThrough('model-dir', 'sub');
  });

  it('the state directory that is a link: refused before anything is written', async () => {
    await refusedThrough('state-dir', '.weightcast');
  });

  it('the CLI exits 2 and names the link', async () => {
    const { dest, outside } = await trap('cli', 'sub');
    const io = memoryIo();
    const code = await runCli(['pull', source, '--to', dest, '--manifest', manifestPath, '--no-agent'], io);
    assert.equal(code, 2, io.err.join(''));
    assert.match(io.err.join(''), /PULL_DESTINATION_SYMLINK: .*sub is a symbolic link/);
    assert.deepEqual(await readdir(outside), []);
  });

  it("a destination that is itself a link is the user's choice and works", async () => {
    const real = join(work.path, 'real-dest');
    await mkdir(real);
    const linked = join(work.path, 'linked-dest');
    await symlink(real, linked);
    const origin = new LocalOrigin(source);
    try {
      await pull(origin, linked, { manifest });
    } finally {
      await origin.close();
    }
    const names = await readdir(real);
    assert.ok(names.includes('top.bin') && names.includes('sub'), names.join(', '));
  });

  describe('through an agent', () => {
    let scheduler: SchedulerServer;
    let agent: Agent;
    before(async () => {
      scheduler = await startScheduler();
      agent = await Agent.start({
        schedulerUrl: scheduler.url,
        cacheDir: join(work.path, 'agent-cache'),
        destinationRoots: [work.path],
      });
    });
    after(async () => {
      await agent.close();
      await scheduler.close();
    });

    it('the agent refuses to write a model through a link in the destination', async () => {
      const { dest, outside } = await trap('agent', 'sub');
      const refused = await agent
        .join({ source, manifest, to: dest })
        .then(() => agent.whenComplete(manifestDigest(manifest).slice('sha256:'.length)))
        .then(
          () => undefined,
          (error: unknown) => error,
        );
      assert.ok(isWeightcastError(refused, 'PULL_DESTINATION_SYMLINK'), String(refused));
      assert.deepEqual(await readdir(outside), []);
    });
  });
});
