/** What `weightcast agent` says at start about its flags: a real agent process. */

import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { CLI, startProcess, stopProcess, type Proc } from '../../scripts/cluster.js';
import { startScheduler, type SchedulerServer } from '../../src/swarm/scheduler/scheduler-server.js';
import { tempDir } from '../helpers/fixtures.js';

let work: { path: string; cleanup: () => Promise<void> };
let scheduler: SchedulerServer;

before(async () => {
  work = await tempDir('agent-flags');
  scheduler = await startScheduler();
});

after(async () => {
  await scheduler.close();
  await work.cleanup();
});

describe('weightcast agent --destination-root', { timeout: 30_000 }, () => {
  it('says at start when a root does not exist or is not a directory, and starts anyway', async () => {
    let agent: Proc | undefined;
    try {
      const missing = join(work.path, 'nope');
      agent = await startProcess(
        [
          CLI,
          'agent',
          '--scheduler',
          scheduler.url,
          '--cache',
          join(work.path, 'cache'),
          '--port',
          '0',
          '--destination-root',
          missing,
          '--destination-root',
          work.path,
          '--destination-root',
          CLI,
        ],
        /listening on (http:\/\/\S+)/,
        'agent',
      );
      // stderr and stdout are separate pipes: the warnings may arrive just after the listening line.
      const said = (text: string): boolean => agent?.lines.some((line) => line.includes(text)) === true;
      for (let wait = 0; wait < 40 && !said('is not a directory'); wait++)
        await new Promise((resolve) => setTimeout(resolve, 25));
      assert.ok(
        said(`--destination-root ${missing} does not exist: pulls into it are copied out`),
        agent.lines.join('\n'),
      );
      assert.ok(said(`--destination-root ${CLI} is not a directory`), agent.lines.join('\n'));
      assert.ok(!said(`--destination-root ${work.path} `), 'an existing directory is not mentioned');
    } finally {
      await stopProcess(agent);
    }
  });
});
