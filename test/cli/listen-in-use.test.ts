/**
 * A service whose port is taken says so the same way whichever it is: `serve`, `scheduler` and
 * `agent` exit 1 with `IO: cannot listen on HOST:PORT: ... EADDRINUSE ...`. Real processes, against
 * a port this test holds.
 */

import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { createServer, type AddressInfo, type Server } from 'node:net';
import { join } from 'node:path';
import { after, before, it } from 'node:test';
import { promisify } from 'node:util';
import { CLI } from '../../scripts/cluster.js';
import { tempDir } from '../helpers/fixtures.js';

const run = promisify(execFile);

let work: { path: string; cleanup: () => Promise<void> };
let taken: Server;
let port: number;

before(async () => {
  work = await tempDir('listen-in-use');
  taken = createServer();
  await new Promise<void>((resolve) => taken.listen(0, '127.0.0.1', resolve));
  port = (taken.address() as AddressInfo).port;
});

after(async () => {
  await new Promise<void>((resolve) => taken.close(() => resolve()));
  await work.cleanup();
});

const commands: Record<string, () => string[]> = {
  serve: () => ['serve', work.path, '--port', String(port)],
  scheduler: () => ['scheduler', '--port', String(port)],
  agent: () => [
    'agent',
    '--scheduler',
    'http://127.0.0.1:9',
    '--cache',
    join(work.path, 'cache'),
    '--port',
    String(port),
  ],
};

for (const [name, argv] of Object.entries(commands)) {
  it(
    `${name} on a port in use: IO, cannot listen on 127.0.0.1:PORT, exit 1`,
    { timeout: 30_000 },
    async () => {
      const failed = await run(process.execPath, [CLI, ...argv()], { timeout: 20_000 }).then(
        () => assert.fail(`${name} should not start on a port in use`),
        (error: { code?: number; stderr?: string }) => error,
      );
      assert.equal(failed.code, 1, failed.stderr);
      assert.match(
        failed.stderr ?? '',
        new RegExp(`^weightcast: IO: cannot listen on 127\\.0\\.0\\.1:${port}: .*EADDRINUSE`, 'm'),
      );
    },
  );
}
