/**
 * Where a slice load reads from: a local directory, an HTTP(S) origin, or the agent on this machine.
 * For an agent the model is first joined there (as `pull --agent` does: the agent starts pulling it
 * through the swarm), then its files are read through the agent's local file API, whose reads wait
 * for the pieces under them and move those pieces to the front of the agent's queue (lazy loading).
 * An agent needs the model manifest: the model is named by its digest.
 */

import { WeightcastError } from '../../errors.js';
import { encodeManifest, manifestDigest, type Manifest } from '../../manifest/manifest.js';
import { HttpOrigin } from '../../origin/http.js';
import { openOrigin, type OpenOriginOptions } from '../../origin/open.js';
import type { Origin } from '../../origin/origin.js';
import { callJson } from '../../swarm/wire/http-json.js';

export interface SliceSourceOptions {
  manifest?: Manifest;
  /** Read through the agent at this URL (its local API) instead of from `source` directly. */
  agentUrl?: string;
  /** Bearer token for the origin (passed on to the agent when joining through one). */
  token?: string;
  origin?: OpenOriginOptions;
  signal?: AbortSignal;
}

const AGENT_CALL_TIMEOUT_MS = 30_000;

/** Opens the origin the loader reads; the caller closes it. */
export async function openSliceOrigin(source: string, options: SliceSourceOptions): Promise<Origin> {
  const files = options.manifest?.files.map((file) => ({ path: file.path, size: file.size }));
  if (options.agentUrl === undefined) {
    return openOrigin(source, {
      ...options.origin,
      ...(files === undefined ? {} : { files }),
      ...(options.token === undefined ? {} : { token: options.token }),
    });
  }
  const { manifest } = options;
  if (manifest === undefined || files === undefined) {
    throw new WeightcastError('USAGE', 'loading through an agent needs the model manifest (--manifest)');
  }
  const base = options.agentUrl.replace(/\/+$/, '');
  await callJson(`${base}/v1/local/models`, 'the agent', {
    method: 'POST',
    timeoutMs: AGENT_CALL_TIMEOUT_MS,
    body: {
      source,
      manifest: encodeManifest(manifest).toString('utf8'),
      ...(options.token === undefined ? {} : { token: options.token }),
    },
    ...(options.signal === undefined ? {} : { signal: options.signal }),
  });
  const hex = manifestDigest(manifest).slice('sha256:'.length);
  return new HttpOrigin(`${base}/v1/local/models/${hex}/files/`, {
    ...options.origin,
    files,
  });
}
