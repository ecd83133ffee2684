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
 *
 * Roles (the scheduler checks the credential first): a member may read, and may register a seed
 * node that is new or re-register one unchanged (a seed node starting up); creating models,
 * commits, re-pointing a node and draining it (`active`) are an operator's.
 */

import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Role } from '../../auth/gate.js';
import { WeightcastError } from '../../errors.js';
import type { HttpRoutes } from '../../swarm/wire/http-json.js';
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
export type CatalogRoutes = HttpRoutes;

export function catalogRoutes(store: CatalogStore): CatalogRoutes {
  return async (req, res, role) => {
    try {
      await route(store, req, res, role);
    } catch (error) {
      sendSeedError(res, error);
    }
  };
}

async function route(
  store: CatalogStore,
  req: IncomingMessage,
  res: ServerResponse,
  role: Role,
): Promise<void> {
  const { parts } = pathParts(req);
  // parts[0..1] are 'v1', 'catalog'.
  const [, , collection, name, action] = parts;
  const method = req.method ?? 'GET';
  if (collection === 'nodes') {
    if (method === 'GET' && name === undefined) return sendJson(res, 200, { nodes: store.listNodes() });
    if (method === 'PUT' && name !== undefined && parts.length === 4) {
      const nodeName = parseBody(nodeNameSchema, name, 'node name');
      const body = parseBody(registerNodeSchema, await readJson(req), 'node registration');
      const known = store.listNodes().find((node) => node.name === nodeName);
      const unchanged = body.active === undefined && (known === undefined || known.url === body.url);
      if (!unchanged) requireOperator(role, `re-pointing or draining seed node ${nodeName}`);
      return sendJson(res, 200, await store.registerNode(nodeName, body.url, body.active));
    }
  }
  if (method !== 'GET') requireOperator(role, `${method} ${req.url ?? ''}`);
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

function requireOperator(role: Role, what: string): void {
  if (role !== 'operator') {
    throw new WeightcastError(
      'FORBIDDEN',
      `${what} is an operator's change to the catalog (WEIGHTCAST_OPERATOR_TOKEN or --operator-token-file)`,
    );
  }
}
