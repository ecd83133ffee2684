/**
 * Finding the agent of this machine, as `weightcast pull` does before it fetches anything: a pull on
 * a host that runs an agent should go through it (the agent shares the model with its peers and
 * keeps it for the next pull), the way dfget goes through dfdaemon.
 *
 * Where it looks: `$WEIGHTCAST_AGENT` (a URL, or `off`), else the default agent port on 127.0.0.1
 * (an agent listening on another address answers its local API there too). The probe is one
 * `GET /healthz` on loopback with a short timeout: a refused connection answers in microseconds.
 * Uses node:http only, so the pull command stays light to start.
 */

import { get } from 'node:http';
import { WeightcastError } from '../errors.js';
import { httpUrl } from '../util/http-url.js';
import { AGENT_PORT_DEFAULT } from './agent/defaults.js';

/** How long the probe waits for the whole answer from 127.0.0.1. */
const PROBE_TIMEOUT_MS = 500;
const PROBE_BODY_BYTES_MAX = 4096;

export type LocalAgent =
  | { found: true; url: string; via: 'env' | 'probe' }
  | { found: false; reason: 'disabled' | 'none-listening' };

export async function findLocalAgent(
  env: NodeJS.ProcessEnv = process.env,
  signal?: AbortSignal,
  probeUrl = `http://127.0.0.1:${AGENT_PORT_DEFAULT}`,
): Promise<LocalAgent> {
  const configured = env['WEIGHTCAST_AGENT']?.trim();
  if (configured !== undefined && configured !== '') {
    if (configured === 'off' || configured === 'none') return { found: false, reason: 'disabled' };
    if (httpUrl(configured) === undefined) {
      throw new WeightcastError(
        'USAGE',
        `WEIGHTCAST_AGENT must be an http(s) URL such as http://127.0.0.1:${AGENT_PORT_DEFAULT}, or off; got ${JSON.stringify(configured)}`,
      );
    }
    return { found: true, url: configured.replace(/\/+$/, ''), via: 'env' };
  }
  return (await answersAsAgent(probeUrl, signal))
    ? { found: true, url: probeUrl, via: 'probe' }
    : { found: false, reason: 'none-listening' };
}

/**
 * Whether `url` answers `/healthz` the way an agent does (`{"ok":true,"name":...}`). Settles within
 * PROBE_TIMEOUT_MS whatever listens there: the deadline covers the whole answer (a server that
 * trickles its body is cut off too), and a response cut short (too large, reset) counts as no agent.
 */
function answersAsAgent(url: string, signal?: AbortSignal): Promise<boolean> {
  const deadline = AbortSignal.timeout(PROBE_TIMEOUT_MS);
  return new Promise((resolve) => {
    const request = get(
      `${url}/healthz`,
      { signal: signal === undefined ? deadline : AbortSignal.any([signal, deadline]) },
      (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => {
          text += chunk;
          if (text.length > PROBE_BODY_BYTES_MAX) request.destroy();
        });
        res.on('error', () => resolve(false));
        res.on('end', () => {
          try {
            const body = JSON.parse(text) as { ok?: unknown; name?: unknown };
            resolve(res.statusCode === 200 && body.ok === true && typeof body.name === 'string');
          } catch {
            resolve(false);
          }
        });
        // After 'end' this changes nothing; without it (destroyed, aborted, reset) it is the answer.
        res.on('close', () => resolve(false));
      },
    );
    request.on('error', () => resolve(false));
  });
}
