/**
 * PeerReader: how a swarm member reads piece bytes from one peer. It speaks the peer wire
 * (peer-wire-client.ts) and falls back to the peer's HTTP file API (HttpOrigin over RangeClient) for
 * a peer that refuses the upgrade, an agent from before the wire. It offers the Origin's `readInto`
 * by file path and offset, as the member reads every source, and turns that into a piece and an
 * offset in it.
 */

import type { ServiceAccess } from '../../auth/transport.js';
import { isWeightcastError } from '../../errors.js';
import { HttpOrigin } from '../../origin/http.js';
import type { OriginCallOptions } from '../../origin/origin.js';
import type { PieceMap } from '../../piece/piece-map.js';
import { PeerWireClient } from './peer-wire-client.js';

export interface PeerReaderOptions {
  /** The peer's base URL. */
  url: string;
  /** The model's manifest digest (hex). */
  model: string;
  map: PieceMap;
  /** File path to index in the manifest, shared by a member's readers. */
  fileIndex: ReadonlyMap<string, number>;
  /** Longest silence from the peer while a read is under way. */
  idleTimeoutMs: number;
  /** Use the peer wire (else HTTP only). */
  wire: boolean;
  /** The cluster credential (HELLO, `Authorization`) and TLS for the peer. */
  access?: ServiceAccess;
}

export class PeerReader {
  private readonly wire: PeerWireClient | undefined;
  private http: HttpOrigin | undefined;

  constructor(private readonly options: PeerReaderOptions) {
    // The wire upgrades the agent's port, over TLS for a peer advertised behind https.
    this.wire =
      options.wire && (options.url.startsWith('http:') || options.url.startsWith('https:'))
        ? new PeerWireClient({
            url: options.url,
            model: options.model,
            idleTimeoutMs: options.idleTimeoutMs,
            tls: options.access?.tls,
            ...(options.access?.token === undefined
              ? {}
              : { credential: Buffer.from(options.access.token, 'utf8') }),
          })
        : undefined;
  }

  async readInto(
    path: string,
    offset: number,
    target: Uint8Array,
    options: OriginCallOptions = {},
  ): Promise<void> {
    const wire = this.wire;
    if (wire !== undefined && !wire.refused) {
      const fileIndex = this.options.fileIndex.get(path);
      const { pieceSize } = this.options.map;
      if (fileIndex === undefined) throw new RangeError(`no file ${path} in the model`);
      const inFile = Math.floor(offset / pieceSize);
      const piece = this.options.map.globalIndex(fileIndex, inFile);
      try {
        await wire.read(piece, offset - inFile * pieceSize, target, options);
        return;
      } catch (error) {
        if (!isWeightcastError(error, 'SWARM_PROTOCOL') || error.details['wireRefused'] !== true) throw error;
      }
    }
    await this.httpOrigin().readInto(path, offset, target, options);
  }

  async close(): Promise<void> {
    await Promise.allSettled([this.wire?.close(), this.http?.close()]);
  }

  private httpOrigin(): HttpOrigin {
    if (this.http !== undefined) return this.http;
    const idle = this.options.idleTimeoutMs;
    this.http = new HttpOrigin(
      `${this.options.url.replace(/\/+$/, '')}/v1/models/${this.options.model}/files/`,
      {
        files: this.options.map.manifest.files.map((file) => ({ path: file.path, size: file.size })),
        // The scheduler decides what happens after a failed transfer; no retries here.
        retries: 0,
        // One connection per peer: a transfer pipelined behind the current one (ring parents get
        // the next piece before this one ends) waits for the socket instead of splitting the pair's
        // bandwidth over two flows; one warm TCP flow per pair. netns fan-out 12.4-12.6 s against
        // 12.5-12.8 s with 4 (5 alternating runs each), and less CPU.
        connections: 1,
        // The pipelined transfer's request goes out at once, behind the current one on the socket,
        // so its bytes follow with no round trip between. Waiting for the socket left each pair idle
        // for a loaded round trip (p50 28 ms) between pieces of ~80 ms on the wire; netns fan-out
        // 12.22 s against 12.35 s on average over 10 alternating pairs.
        pipeline: 2,
        headersTimeoutMs: idle,
        bodyIdleTimeoutMs: idle,
        connectTimeoutMs: idle,
        ...(this.options.access?.token === undefined ? {} : { token: this.options.access.token }),
        tls: this.options.access?.tls,
      },
    );
    return this.http;
  }
}
