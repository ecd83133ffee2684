/** A worker for the WorkerPool tests: echoes, crashes or never answers, as the job says. */

import { parentPort } from 'node:worker_threads';

parentPort?.on('message', (job: { op: 'echo' | 'crash' | 'hang'; value?: number }) => {
  if (job.op === 'crash') throw new Error('asked to crash');
  if (job.op === 'echo') parentPort?.postMessage(job.value);
});
