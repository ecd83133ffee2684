/**
 * The catalog as its clients see it (put, distribute, pulls from the tier, seed nodes registering):
 * typed calls over HTTP to the scheduler's `/v1/catalog` routes. Every call takes an AbortSignal and
 * has a timeout; answers are checked with the wire schemas.
 */

import type { ServiceAccess } from '../../auth/transport.js';
import { WeightcastError } from '../../errors.js';
import { encodeManifest, manifestDigest, parseManifest, type Manifest } from '../../manifest/manifest.js';
import {
  catalogNodeSchema,
  commitResultSchema,
  modelSnapshotSchema,
  parseBody,
  seedCall,
  seedCallRaw,
  type CatalogNode,
  type CommitResult,
  type CommitUpdate,
  type ModelSnapshot,
} from '../wire.js';
import { z } from 'zod';

const CALL_TIMEOUT_MS = 30_000;

export interface CallSignal {
  signal?: AbortSignal | undefined;
}

export class CatalogClient {
  readonly base: string;

  constructor(
    schedulerUrl: string,
    /** The credential (and TLS) the calls carry. */
    readonly access: ServiceAccess = {},
  ) {
    this.base = `${schedulerUrl.replace(/\/+$/, '')}/v1/catalog`;
  }

  async registerNode(
    name: string,
    url: string,
    options: CallSignal & { active?: boolean } = {},
  ): Promise<CatalogNode> {
    const body = await seedCall(`${this.base}/nodes/${encodeURIComponent(name)}`, 'the catalog', {
      method: 'PUT',
      body: { url, ...(options.active === undefined ? {} : { active: options.active }) },
      timeoutMs: CALL_TIMEOUT_MS,
      access: this.access,
      signal: options.signal,
    });
    return parseBody(catalogNodeSchema, body, 'node registration answer');
  }

  async nodes(options: CallSignal = {}): Promise<CatalogNode[]> {
    const body = await seedCall(`${this.base}/nodes`, 'the catalog', {
      timeoutMs: CALL_TIMEOUT_MS,
      access: this.access,
      signal: options.signal,
    });
    return parseBody(z.object({ nodes: z.array(catalogNodeSchema) }), body, 'node list').nodes;
  }

  async models(options: CallSignal = {}): Promise<string[]> {
    const body = await seedCall(`${this.base}/models`, 'the catalog', {
      timeoutMs: CALL_TIMEOUT_MS,
      access: this.access,
      signal: options.signal,
    });
    return parseBody(z.object({ models: z.array(z.string()) }), body, 'model list').models;
  }

  /** The model's map, or undefined when the catalog does not have it. */
  async snapshot(model: string, options: CallSignal = {}): Promise<ModelSnapshot | undefined> {
    try {
      const body = await seedCall(`${this.base}/models/${model}`, 'the catalog', {
        timeoutMs: CALL_TIMEOUT_MS,
        access: this.access,
        signal: options.signal,
      });
      return parseBody(modelSnapshotSchema, body, 'catalog snapshot');
    } catch (error) {
      if (error instanceof WeightcastError && error.code === 'SEED_UNKNOWN_MODEL') return undefined;
      throw error;
    }
  }

  async requireSnapshot(model: string, options: CallSignal = {}): Promise<ModelSnapshot> {
    const snapshot = await this.snapshot(model, options);
    if (snapshot === undefined) {
      throw new WeightcastError('SEED_UNKNOWN_MODEL', `the catalog has no model ${model}; put it first`, {
        model,
      });
    }
    return snapshot;
  }

  /** The model's manifest, checked against its name. */
  async manifest(model: string, options: CallSignal = {}): Promise<Manifest> {
    const bytes = await seedCallRaw(`${this.base}/models/${model}/manifest`, 'the catalog', {
      timeoutMs: CALL_TIMEOUT_MS,
      access: this.access,
      signal: options.signal,
    });
    const manifest = parseManifest(bytes, 'the catalog manifest');
    if (manifestDigest(manifest) !== `sha256:${model}`) {
      throw new WeightcastError('MANIFEST_DIGEST_MISMATCH', `the catalog's manifest is not model ${model}`);
    }
    return manifest;
  }

  /** Files the model's manifest ahead of its pieces, so seed nodes accept them (`put`). */
  async announceModel(manifest: Manifest, options: CallSignal = {}): Promise<void> {
    const model = manifestDigest(manifest).slice('sha256:'.length);
    await seedCallRaw(`${this.base}/models/${model}/manifest`, 'the catalog', {
      method: 'PUT',
      body: encodeManifest(manifest),
      timeoutMs: CALL_TIMEOUT_MS,
      signal: options.signal,
      access: this.access,
    });
  }

  async createModel(
    manifest: Manifest,
    holders: readonly (readonly string[])[],
    options: CallSignal = {},
  ): Promise<ModelSnapshot> {
    const model = manifestDigest(manifest).slice('sha256:'.length);
    const body = await seedCall(`${this.base}/models/${model}`, 'the catalog', {
      method: 'POST',
      body: { manifest: encodeManifest(manifest).toString('utf8'), holders },
      timeoutMs: CALL_TIMEOUT_MS,
      access: this.access,
      signal: options.signal,
    });
    return parseBody(modelSnapshotSchema, body, 'catalog snapshot');
  }

  async commit(
    model: string,
    updates: readonly CommitUpdate[],
    options: CallSignal = {},
  ): Promise<CommitResult[]> {
    const body = await seedCall(`${this.base}/models/${model}/commit`, 'the catalog', {
      method: 'POST',
      body: { updates },
      timeoutMs: CALL_TIMEOUT_MS,
      access: this.access,
      signal: options.signal,
    });
    return parseBody(commitResultSchema, body, 'commit answer').results;
  }
}

/** Accepts `sha256:<hex>` or `<hex>`; returns the hex. */
export function modelNameOf(text: string): string {
  const hex = text.startsWith('sha256:') ? text.slice('sha256:'.length) : text;
  if (!/^[0-9a-f]{64}$/.test(hex)) {
    throw new WeightcastError(
      'USAGE',
      `a model is named by its manifest digest (sha256:<64 hex>), got ${text}`,
    );
  }
  return hex;
}
