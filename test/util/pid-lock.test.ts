import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { takePidLock } from '../../src/util/pid-lock.js';

const held = (owner: number): Error => Object.assign(new Error(`held by ${owner}`), { owner });
import { tempDir } from '../helpers/fixtures.js';

test('a PID lock: taken with our PID, refused while a live process holds it, released by its holder', async () => {
  const dir = await tempDir('pid-lock');
  const path = join(dir.path, 'sub', 'x.lock');
  // A live process other than this one: a child that sleeps until killed.
  const child = spawn(process.execPath, ['-e', 'setTimeout(() => {}, 60_000)'], { stdio: 'ignore' });
  try {
    const release = await takePidLock(path, held);
    assert.equal((await readFile(path, 'utf8')).trim(), String(process.pid));
    await release();
    await writeFile(path, `${child.pid}\n`);
    await assert.rejects(
      takePidLock(path, held),
      (error: unknown) => (error as { owner?: number }).owner === child.pid,
    );
  } finally {
    child.kill('SIGKILL');
    await dir.cleanup();
  }
});

test('a PID lock left by a process that is gone is taken over', async () => {
  const dir = await tempDir('pid-lock');
  try {
    const gone = spawnSync(process.execPath, ['-e', 'process.stdout.write(String(process.pid))'], {
      encoding: 'utf8',
    });
    const path = join(dir.path, 'x.lock');
    await writeFile(path, `${gone.stdout}\n`);
    const release = await takePidLock(path, held);
    assert.equal((await readFile(path, 'utf8')).trim(), String(process.pid));
    await release();
  } finally {
    await dir.cleanup();
  }
});
