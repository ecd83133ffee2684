import assert from 'node:assert/strict';
import { test } from 'node:test';
import { WorkerPool } from '../../src/util/worker-pool.js';

type Job = { op: 'echo' | 'crash' | 'hang'; value?: number };
const SCRIPT = new URL('../helpers/pool-worker.js', import.meta.url);

test('WorkerPool: jobs beyond the workers queue and all answer', async () => {
  const pool = new WorkerPool<Job, number>(SCRIPT, 2, 'test pool');
  try {
    const answers = await Promise.all(
      Array.from({ length: 7 }, (_, i) => pool.run({ op: 'echo', value: i })),
    );
    assert.deepEqual(answers, [0, 1, 2, 3, 4, 5, 6]);
  } finally {
    await pool.close();
  }
});

test('WorkerPool: a crashed worker fails its job only and is replaced', async () => {
  const pool = new WorkerPool<Job, number>(SCRIPT, 1, 'test pool');
  try {
    await assert.rejects(pool.run({ op: 'crash' }), { code: 'IO', message: /test pool worker failed/ });
    assert.equal(pool.threads, 1);
    assert.equal(await pool.run({ op: 'echo', value: 5 }), 5);
  } finally {
    await pool.close();
  }
});

test('WorkerPool: an aborted job is dropped; close rejects queued and running jobs', async () => {
  const pool = new WorkerPool<Job, number>(SCRIPT, 1, 'test pool');
  const aborted = new AbortController();
  aborted.abort();
  await assert.rejects(pool.run({ op: 'echo', value: 1 }, { signal: aborted.signal }), { code: 'ABORTED' });
  const running = assert.rejects(pool.run({ op: 'hang' }), { code: 'ABORTED', message: /closed/ });
  const queued = assert.rejects(pool.run({ op: 'echo', value: 2 }), { code: 'ABORTED', message: /closed/ });
  await pool.close();
  await running;
  await queued;
  await assert.rejects(pool.run({ op: 'echo', value: 3 }), { code: 'ABORTED' });
});

test('WorkerPool: workers that cannot start end the pool with one typed error, not an endless respawn', async () => {
  const pool = new WorkerPool<Job, number>(new URL('./no-such-worker.js', import.meta.url), 2, 'test pool');
  try {
    const answers = await Promise.allSettled(
      Array.from({ length: 5 }, () => pool.run({ op: 'echo', value: 1 })),
    );
    assert.ok(answers.every((answer) => answer.status === 'rejected'));
    const last = answers.at(-1) as PromiseRejectedResult;
    assert.equal((last.reason as { code?: string }).code, 'IO');
    assert.match(
      String(last.reason),
      /test pool's worker threads cannot start: 3 in a row failed before their first answer/,
    );
    // No worker is started again: the pool stays as it ended, and later jobs get the same answer.
    assert.equal(pool.threads, 0);
    await assert.rejects(pool.run({ op: 'echo', value: 2 }), /cannot start/);
    await new Promise((resolve) => setTimeout(resolve, 100));
    assert.equal(pool.threads, 0);
  } finally {
    await pool.close();
  }
});

test('WorkerPool: jobs that crash fresh workers now and then do not end the pool', async () => {
  const pool = new WorkerPool<Job, number>(SCRIPT, 1, 'test pool');
  try {
    for (let round = 0; round < 4; round++) {
      await assert.rejects(pool.run({ op: 'crash' }), { code: 'IO', message: /test pool worker failed/ });
      await assert.rejects(pool.run({ op: 'crash' }), { code: 'IO', message: /test pool worker failed/ });
      assert.equal(await pool.run({ op: 'echo', value: round }), round);
    }
  } finally {
    await pool.close();
  }
});
