/**
 * The catalog's HTTP routes, mounted by the scheduler under `/v1/catalog` when it runs with
 * `--catalog DIR`:
 *
 *   GET  /v1/catalog/nodes                      -> { nodes: [{name, url, active}] }
 *   PUT  /v1/catalog/nodes/<name>   {url, active?} -> the node (register, or update URL / flag)
 *   GET  /v1/catalog/models                     -> { models: [hex] }
 *   POST /v1/catalog/models/<hex>   {manifest, holders} -> the model's snapshot (create)
 *   GET  /v1/catalog/models/<hex>               -> { model, pieceSize, nodes, pieces }
 *   GET  /v1/catalog/models/<hex>/manifest      -> the canonical manifest bytes (created or announced)
 *   PUT  /v1/catalog/models/<hex>/manifest  manifest -> { model } (announce: `put` files it first)
 *   POST /v1/catalog/models/<hex>/commit  {updates: [{piece, expectVersion, holders}]}
 *                                              -> { results: [{piece, ok, version}] }
 *
 * A conflicting compare-and-swap is not an error answer: its result says `ok: false` with the
 * entry's current version, so one call can commit some updates and report the others.
 */

import type { IncomingMessage, ServerResponse } from 'node:http';
import { WeightcastError } from '../../errors.js';
import {
  commitSchema,
  createModelSchema,
  modelHexSchema,
  nodeNameSchema,
  parseBody,
  pathParts,
  readBody,
  readJson,
  registerNodeSchema,
  sendSeedError,
  sendJson,
} from '../wire.js';
import { checkedManifest, type CatalogStore } from './store.js';
import { MANIFEST_BYTES_MAX } from '../../manifest/manifest.js';

/** What the scheduler calls for a request under `/v1/catalog`; answers it, errors included. */
export type CatalogRoutes = (req: IncomingMessage, res: ServerResponse) => Promise<void>;

export function catalogRoutes(store: CatalogStore): CatalogRoutes {
  return async (req, res) => {
    try {
      await route(store, req, res);
    } catch (error) {
      sendSeedError(res, error);
    }
  };
}

async function route(store: CatalogStore, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const { parts } = pathParts(req);
  // parts[0..1] are 'v1', 'catalog'.
  const [, , collection, name, action] = parts;
  const method = req.method ?? 'GET';
  if (collection === 'nodes') {
    if (method === 'GET' && name === undefined) return sendJson(res, 200, { nodes: store.listNodes() });
    if (method === 'PUT' && name !== undefined && parts.length === 4) {
      const nodeName = parseBody(nodeNameSchema, name, 'node name');
      const body = parseBody(registerNodeSchema, await readJson(req), 'node registration');
      return sendJson(res, 200, await store.registerNode(nodeName, body.url, body.active));
    }
  }
  if (collection === 'models') {
    if (method === 'GET' && name === undefined) return sendJson(res, 200, { models: store.listModels() });
    if (name !== undefined) {
      const model = parseBody(modelHexSchema, name, 'model name');
      if (method === 'GET' && parts.length === 4) return sendJson(res, 200, store.snapshot(model));
      if (method === 'POST' && parts.length === 4) {
        const body = parseBody(createModelSchema, await readJson(req), 'model creation');
        const manifest = checkedManifest(body.manifest, model);
        return sendJson(res, 200, await store.createModel(manifest, body.holders));
      }
      if (method === 'GET' && action === 'manifest' && parts.length === 5) {
        const bytes = await store.manifestBytes(model);
        res.writeHead(200, { 'content-type': 'application/json', 'content-length': bytes.length });
        res.end(bytes);
        return;
      }
      if (method === 'PUT' && action === 'manifest' && parts.length === 5) {
        const bytes = await readBody(req, MANIFEST_BYTES_MAX);
        await store.announceModel(checkedManifest(bytes.toString('utf8'), model));
        return sendJson(res, 200, { model });
      }
      if (method === 'POST' && action === 'commit' && parts.length === 5) {
        const body = parseBody(commitSchema, await readJson(req), 'commit');
        return sendJson(res, 200, { results: await store.commit(model, body.updates) });
      }
    }
  }
  throw new WeightcastError('USAGE', `no catalog route ${method} ${req.url ?? ''}`);
}
