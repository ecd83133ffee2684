/**
 * `node dist/bench/netns/join-client.js AGENT_URL JOIN_JSON MODEL_HEX`: what bench:fanout runs on
 * every host to ask that host's agent for a model, as a loader on the host would: POST the join
 * (source and manifest) to the agent's local API, then wait until the agent holds the model
 * verified (a status request that waits for completion).
 *
 * It gates itself: it reads the join body, opens its connection to the agent (a status request for
 * the model, 404 until it is joined), prints `ready`, and sends the join only when a line arrives on
 * stdin. So every host's request leaves within a millisecond of the others once bench:fanout
 * releases them, and starting a process (tens of milliseconds of CPU per host on the 2-core
 * testbed, eight at once) happens before the clock starts, not in the measured window.
 *
 * Exit 0 once the model is complete, 1 on any failure (with one line on stderr), 2 on bad usage.
 */

import { readFileSync } from 'node:fs';
import { isWeightcastError } from '../../src/errors.js';
import { callJson } from '../../src/swarm/wire/http-json.js';

/** How long the agent is asked to hold each status request open before answering "not yet". */
const WAIT_COMPLETE_MS = 60_000;
/** Status requests before giving up (bench:fanout stops the client at its own timeout first). */
const STATUS_TRIES_MAX = 20;
const CALL_TIMEOUT_MS = WAIT_COMPLETE_MS + 10_000;

/** Resolves at the first line on stdin (the release), rejects if stdin ends without one. */
function released(): Promise<void> {
  return new Promise((resolve, reject) => {
    let seen = '';
    process.stdin.on('data', (chunk: Buffer) => {
      seen += chunk.toString('utf8');
      if (seen.includes('\n')) {
        process.stdin.pause();
        resolve();
      }
    });
    process.stdin.on('end', () => reject(new Error('stdin closed before the release')));
  });
}

function isComplete(status: unknown): boolean {
  return (status as { complete?: unknown } | undefined)?.complete === true;
}

async function main(argv: readonly string[]): Promise<number> {
  const [agentUrl, joinPath, hex] = argv;
  if (agentUrl === undefined || joinPath === undefined || hex === undefined || !/^[0-9a-f]{64}$/.test(hex)) {
    process.stderr.write('usage: join-client.js AGENT_URL JOIN_JSON MODEL_HEX\n');
    return 2;
  }
  const base = agentUrl.replace(/\/+$/, '');
  const join = JSON.parse(readFileSync(joinPath, 'utf8')) as unknown;
  const status = `${base}/v1/local/models/${hex}`;
  const what = 'the agent';
  try {
    // Opens the pooled connection (and compiles the request path) before the release; any answer
    // will do (the model is not joined yet), only an agent that cannot be reached is a failure.
    await callJson(status, what, { timeoutMs: CALL_TIMEOUT_MS }).catch((error: unknown) => {
      if (isWeightcastError(error, 'SCHEDULER_UNREACHABLE')) throw error;
    });
    process.stdout.write('ready\n');
    await released();
    const joined = await callJson(`${base}/v1/local/models`, what, {
      method: 'POST',
      body: join,
      timeoutMs: CALL_TIMEOUT_MS,
    });
    if (isComplete(joined)) return 0;
    for (let attempt = 0; attempt < STATUS_TRIES_MAX; attempt++) {
      const answer = await callJson(`${status}?waitCompleteMs=${WAIT_COMPLETE_MS}`, what, {
        timeoutMs: CALL_TIMEOUT_MS,
      });
      if (isComplete(answer)) return 0;
    }
    throw new Error(`the model was not complete after ${STATUS_TRIES_MAX} status requests`);
  } catch (error) {
    process.stderr.write(`join-client: ${error instanceof Error ? error.message : String(error)}\n`);
    return 1;
  }
}

// Exit at once: pooled keep-alive connections would otherwise hold the process (and the timing) open.
process.exit(await main(process.argv.slice(2)));
