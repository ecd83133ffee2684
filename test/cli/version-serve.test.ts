import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { runCli } from '../../src/cli/main.js';
import { memoryIo } from '../../src/cli/io.js';
import { tempDir } from '../helpers/fixtures.js';

test('weightcast --version prints the version in package.json', async () => {
  const packageJson = JSON.parse(
    await readFile(new URL('../../../package.json', import.meta.url), 'utf8'),
  ) as { version: string };
  for (const flag of ['--version', '-V']) {
    const io = memoryIo();
    assert.equal(await runCli([flag], io), 0);
    assert.equal(io.out.join(''), `${packageJson.version}\n`);
  }
});

/** Waits (bounded) until the command has printed its first line. */
async function firstLine(out: string[]): Promise<string> {
  for (let waited = 0; waited < 5000; waited += 10) {
    const text = out.join('');
    if (text.includes('\n')) return text.slice(0, text.indexOf('\n'));
    await sleep(10);
  }
  throw new Error('serve printed nothing within 5 s');
}

test('weightcast serve DIR prints {"url"} and serves byte ranges until interrupted', async () => {
  const dir = await tempDir('cli-serve');
  try {
    await writeFile(join(dir.path, 'weights.bin'), 'abcdefghij');
    const controller = new AbortController();
    const io = memoryIo(controller.signal);
    const running = runCli(['serve', dir.path, '--host', '127.0.0.1'], io);
    const { url } = JSON.parse(await firstLine(io.out)) as { url: string };
    assert.match(url, /^http:\/\/127\.0\.0\.1:\d+\/$/);
    const response = await fetch(new URL('weights.bin', url), { headers: { range: 'bytes=2-5' } });
    assert.equal(response.status, 206);
    assert.equal(await response.text(), 'cdef');
    controller.abort();
    assert.equal(await running, 0);
    assert.deepEqual(io.err, []);
  } finally {
    await dir.cleanup();
  }
});

test('weightcast serve: a missing directory or a bad port is a usage error', async () => {
  const dir = await tempDir('cli-serve-bad');
  try {
    const missing = memoryIo();
    assert.equal(await runCli(['serve', join(dir.path, 'nope')], missing), 2);
    assert.match(missing.err.join(''), /USAGE: serve: .* is not a directory/);
    const port = memoryIo();
    assert.equal(await runCli(['serve', dir.path, '--port', '70000'], port), 2);
    assert.match(port.err.join(''), /USAGE: .*--port must be 0-65535/);
  } finally {
    await dir.cleanup();
  }
});
