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
 *
 * It keeps its own small node:http client rather than the swarm's callJson (undici): with that, in
 * alternating runs the last host finished 0.1-0.2 s later at the same median.
 */

import { readFileSync } from 'node:fs';
import { Agent, request } from 'node:http';

/** How long the agent is asked to hold each status request open before answering "not yet". */
const WAIT_COMPLETE_MS = 60_000;
/** Status requests before giving up (bench:fanout stops the client at its own timeout first). */
const STATUS_TRIES_MAX = 20;
/** Bytes of an agent's answer kept (a status is a few hundred bytes). */
const ANSWER_BYTES_MAX = 1024 * 1024;
const REQUEST_TIMEOUT_MS = WAIT_COMPLETE_MS + 10_000;

interface Answer {
  status: number;
  body: string;
}

function call(agent: Agent, url: URL, method: 'GET' | 'POST', body?: Buffer): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = request(
      url,
      {
        agent,
        method,
        timeout: REQUEST_TIMEOUT_MS,
        headers:
          body === undefined ? {} : { 'content-type': 'application/json', 'content-length': body.length },
      },
      (res) => {
        const chunks: Buffer[] = [];
        let size = 0;
        res.on('data', (chunk: Buffer) => {
          size += chunk.length;
          if (size <= ANSWER_BYTES_MAX) chunks.push(chunk);
        });
        res.on('end', () =>
          resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString('utf8') }),
        );
        res.on('error', reject);
      },
    );
    req.on('timeout', () =>
      req.destroy(new Error(`${method} ${url.pathname}: no answer in ${REQUEST_TIMEOUT_MS} ms`)),
    );
    req.on('error', reject);
    req.end(body);
  });
}

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

function isComplete(body: string): boolean {
  try {
    return (JSON.parse(body) as { complete?: unknown }).complete === true;
  } catch {
    return false;
  }
}

async function main(argv: readonly string[]): Promise<number> {
  const [agentUrl, joinPath, hex] = argv;
  if (agentUrl === undefined || joinPath === undefined || hex === undefined || !/^[0-9a-f]{64}$/.test(hex)) {
    process.stderr.write('usage: join-client.js AGENT_URL JOIN_JSON MODEL_HEX\n');
    return 2;
  }
  const base = agentUrl.replace(/\/+$/, '');
  const body = readFileSync(joinPath);
  const agent = new Agent({ keepAlive: true, maxSockets: 1 });
  const status = new URL(`${base}/v1/local/models/${hex}`);
  try {
    // Opens the connection (and compiles the request path) before the release.
    await call(agent, status, 'GET');
    process.stdout.write('ready\n');
    await released();
    const joined = await call(agent, new URL(`${base}/v1/local/models`), 'POST', body);
    if (joined.status !== 200) throw new Error(`join: HTTP ${joined.status}: ${joined.body.slice(0, 300)}`);
    if (isComplete(joined.body)) return 0;
    const waiting = new URL(`${status.href}?waitCompleteMs=${WAIT_COMPLETE_MS}`);
    for (let attempt = 0; attempt < STATUS_TRIES_MAX; attempt++) {
      const answer = await call(agent, waiting, 'GET');
      if (answer.status !== 200)
        throw new Error(`status: HTTP ${answer.status}: ${answer.body.slice(0, 300)}`);
      if (isComplete(answer.body)) return 0;
    }
    throw new Error(`the model was not complete after ${STATUS_TRIES_MAX} status requests`);
  } catch (error) {
    process.stderr.write(`join-client: ${error instanceof Error ? error.message : String(error)}\n`);
    return 1;
  } finally {
    agent.destroy();
  }
}

process.exitCode = await main(process.argv.slice(2));
