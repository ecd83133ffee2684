/**
 * Opening a peer-wire connection (wire/peer-frames.ts), shared by the request client
 * (peer-wire-client.ts) and a ring child's feed (ring-feed.ts): the socket, with Node's `onread`
 * from the start (over TLS too), the upgrade request and our HELLO in one write, and the reading of
 * the upgrade's answer.
 */

import { connect, isIP, type OnReadOpts, type Socket } from 'node:net';
import { connect as connectTls, type ConnectionOptions } from 'node:tls';
import { tlsClientOptions, type ClientTls } from '../../auth/transport.js';
import { PEER_WIRE_PATH, PEER_WIRE_UPGRADE, PEER_WIRE_VERSION, encodeHello } from '../wire/peer-frames.js';

/** The upgrade answer's head, at most. */
export const UPGRADE_HEAD_BYTES_MAX = 4096;

/** Connects to a peer's agent port; `ready` runs once it may be written to (after TLS, if any). */
export function openWireSocket(
  url: URL,
  onread: OnReadOpts,
  tls: ClientTls | undefined,
  ready: () => void,
): Socket {
  const host = url.hostname.startsWith('[') ? url.hostname.slice(1, -1) : url.hostname;
  const secure = url.protocol === 'https:';
  // Over TLS the decrypted bytes land in the same buffers: tls.connect takes `onread` since Node
  // 15.1 (nodejs/node#35753), though @types/node does not list it.
  const socket = secure
    ? connectTls(tlsSocketOptions(host, url, onread, tls)).setNoDelay(true)
    : connect({ host, port: url.port === '' ? 80 : Number(url.port), noDelay: true, onread });
  socket.on(secure ? 'secureConnect' : 'connect', ready);
  return socket;
}

function tlsSocketOptions(
  host: string,
  url: URL,
  onread: OnReadOpts,
  tls: ClientTls | undefined,
): ConnectionOptions & { onread: OnReadOpts } {
  return {
    host,
    port: url.port === '' ? 443 : Number(url.port),
    ...(isIP(host) === 0 ? { servername: host } : {}),
    onread,
    ...tlsClientOptions({ tls }),
  };
}

/**
 * Writes the upgrade request and our HELLO in one go, and `then` (frames the peer reads after our
 * HELLO, such as a ring child's SUBSCRIBE) with them. A peer that turns the HELLO away reads nothing
 * after it.
 */
export function sendUpgradeAndHello(
  socket: Socket,
  url: URL,
  model: Uint8Array,
  credential: Uint8Array,
  then?: Buffer,
): void {
  socket.cork();
  socket.write(
    `GET ${PEER_WIRE_PATH} HTTP/1.1\r\nhost: ${url.host}\r\n` +
      `connection: Upgrade\r\nupgrade: ${PEER_WIRE_UPGRADE}\r\n\r\n`,
  );
  socket.write(encodeHello({ version: PEER_WIRE_VERSION, model, credential }));
  if (then !== undefined) socket.write(then);
  socket.uncork();
}

export type UpgradeAnswer =
  /** The head is not complete yet. */
  | { kind: 'partial' }
  /** 101 to the peer wire; `rest` are the bytes after the head (a copy). */
  | { kind: 'switched'; rest: Buffer }
  /** Anything else: the peer does not speak the wire (`status`: its HTTP status, or 1). */
  | { kind: 'refused'; status: number };

/** Reads the upgrade answer from the first `filled` bytes of `head`. */
export function readUpgradeAnswer(head: Buffer, filled: number): UpgradeAnswer {
  const end = head.subarray(0, filled).indexOf('\r\n\r\n');
  if (end === -1) return { kind: 'partial' };
  const text = head.subarray(0, end).toString('latin1');
  const status = /^HTTP\/1\.[01] (\d{3}) /.exec(text)?.[1];
  if (status !== '101' || !new RegExp(`^upgrade:\\s*${PEER_WIRE_UPGRADE}\\s*$`, 'im').test(text))
    return { kind: 'refused', status: Number(status ?? 1) || 1 };
  return { kind: 'switched', rest: Buffer.from(head.subarray(end + 4, filled)) };
}

/**
 * Says that the peer wire ended one connection after a fault of its own (something thrown while
 * handling a peer's bytes in a socket callback, where it would be uncaught and stop the process).
 */
export function warnWireFault(what: string, error: unknown): void {
  const detail = error instanceof Error ? (error.stack ?? error.message) : String(error);
  process.emitWarning(`weightcast: the peer wire closed ${what} after an internal error: ${detail}`);
}
