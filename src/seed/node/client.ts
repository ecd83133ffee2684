/** Calls to one seed node's `/v1/seed` routes, typed and checked; each takes an AbortSignal. */

import type { ServiceAccess } from '../../auth/transport.js';
import { encodeManifest, manifestDigest, type Manifest } from '../../manifest/manifest.js';
import { heldSchema, parseBody, seedCall, seedCallRaw, storeResultSchema, verifySchema } from '../wire.js';

const CALL_TIMEOUT_MS = 30_000;
const TRANSFER_TIMEOUT_MS = 300_000;

export interface NodeCallOptions {
  signal?: AbortSignal | undefined;
}

export class SeedNodeClient {
  readonly base: string;

  constructor(
    readonly name: string,
    url: string,
    /** The credential (and TLS) the calls carry. */
    readonly access: ServiceAccess = {},
  ) {
    this.base = `${url.replace(/\/+$/, '')}/v1/seed/models`;
  }

  private what(): string {
    return `seed node ${this.name}`;
  }

  async putManifest(manifest: Manifest, options: NodeCallOptions = {}): Promise<void> {
    const hex = manifestDigest(manifest).slice('sha256:'.length);
    await seedCall(`${this.base}/${hex}`, this.what(), {
      method: 'PUT',
      body: encodeManifest(manifest),
      timeoutMs: TRANSFER_TIMEOUT_MS,
      access: this.access,
      signal: options.signal,
    });
  }

  async held(hex: string, options: NodeCallOptions = {}): Promise<number[]> {
    const body = await seedCall(`${this.base}/${hex}/pieces`, this.what(), {
      timeoutMs: CALL_TIMEOUT_MS,
      access: this.access,
      signal: options.signal,
    });
    return parseBody(heldSchema, body, 'held pieces').held;
  }

  async putPiece(
    hex: string,
    piece: number,
    bytes: Uint8Array,
    options: NodeCallOptions = {},
  ): Promise<string> {
    const body = await seedCall(`${this.base}/${hex}/pieces/${piece}`, this.what(), {
      method: 'PUT',
      body: bytes,
      timeoutMs: TRANSFER_TIMEOUT_MS,
      access: this.access,
      signal: options.signal,
    });
    return parseBody(storeResultSchema, body, 'put answer').result;
  }

  async getPiece(hex: string, piece: number, length: number, options: NodeCallOptions = {}): Promise<Buffer> {
    return seedCallRaw(`${this.base}/${hex}/pieces/${piece}`, this.what(), {
      timeoutMs: TRANSFER_TIMEOUT_MS,
      access: this.access,
      signal: options.signal,
      maxBytes: length,
    });
  }

  async deletePiece(hex: string, piece: number, options: NodeCallOptions = {}): Promise<void> {
    await seedCall(`${this.base}/${hex}/pieces/${piece}`, this.what(), {
      method: 'DELETE',
      timeoutMs: CALL_TIMEOUT_MS,
      access: this.access,
      signal: options.signal,
    });
  }

  async verifyPiece(
    hex: string,
    piece: number,
    options: NodeCallOptions = {},
  ): Promise<{ ok: boolean; digest: string }> {
    const body = await seedCall(`${this.base}/${hex}/pieces/${piece}/verify`, this.what(), {
      method: 'POST',
      timeoutMs: TRANSFER_TIMEOUT_MS,
      access: this.access,
      signal: options.signal,
    });
    return parseBody(verifySchema, body, 'verify answer');
  }

  /** Asks this node to pull `piece` from the node at `fromUrl` (verified before it is stored). */
  async copyFrom(
    hex: string,
    piece: number,
    fromUrl: string,
    options: NodeCallOptions & { bytesPerSecond?: number | undefined } = {},
  ): Promise<string> {
    const body = await seedCall(`${this.base}/${hex}/pieces/${piece}/copy`, this.what(), {
      method: 'POST',
      body: {
        from: fromUrl,
        ...(options.bytesPerSecond === undefined ? {} : { bytesPerSecond: options.bytesPerSecond }),
      },
      timeoutMs: TRANSFER_TIMEOUT_MS,
      access: this.access,
      signal: options.signal,
    });
    return parseBody(storeResultSchema, body, 'copy answer').result;
  }
}
