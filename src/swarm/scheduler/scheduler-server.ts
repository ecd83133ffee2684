/**
 * `weightcast scheduler`: the HTTP face of the swarm services. It keeps one SwarmService per model
 * (created by the first agent that registers with the manifest), keeps a sync channel per host
 * (frames in: reports and heartbeats; frames out: assignments pushed as they are made; a plain HTTP
 * sync with a long poll remains for simple clients), and ticks every swarm on a short interval so
 * timeouts and silent hosts are handled. All scheduling lives in the core.
 */

import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { Gate, type ServiceCredentials } from '../../auth/gate.js';
import { assertListenAllowed, createServiceServer, schemeOf, type ServerTls } from '../../auth/transport.js';
import { WeightcastError } from '../../errors.js';
import { manifestDigest, parseManifest } from '../../manifest/manifest.js';
import { PieceMap } from '../../piece/piece-map.js';
import { modelHex, parseMessage, registerSchema, syncSchema } from '../wire/protocol.js';
import { readJsonBody, sendError, sendJson, statusOf, type HttpRoutes } from '../wire/http-json.js';
import { listenOn } from '../../util/listen.js';
import { CHANNEL_PROTOCOL, FrameReader, encodeFrame, errorFrame } from '../wire/sync-channel.js';
import { SWARM_SERVICE_DEFAULTS, SwarmService, type SwarmServiceOptions } from './swarm-service.js';
import { createLimitedServer, resolveLimits, type ServerLimits } from '../../util/server-limits.js';

export interface SchedulerOptions extends Partial<SwarmServiceOptions> {
  host?: string;
  port?: number;
  /** Models the scheduler serves at once. */
  swarmsMax?: number;
  /** Hosts per model. */
  hostsMax?: number;
  onEvent?: (event: SchedulerEvent) => void;
  /** The seed tier's catalog routes (`--catalog DIR`), answered under `/v1/catalog`. */
  catalog?: HttpRoutes;
  /** Timeouts, connections per address and the body budget (src/util/server-limits.ts). */
  limits?: Partial<ServerLimits>;
  /**
   * Who may call: members (the cluster token) use the swarms and read the catalog; operators (the
   * operator token) also change it. None: every caller may do everything (loopback demos).
   */
  credentials?: ServiceCredentials;
  /** Listen with HTTPS. */
  tls?: ServerTls;
  /** Listen on a non-loopback address without credentials (else refused: USAGE). */
  insecure?: boolean;
}

/**
 * A request (a register carries the manifest) must arrive whole within a minute: a body that
 * trickles in holds its connection and buffer (sync channels are upgrades, not timed by these).
 */
const SCHEDULER_LIMIT_DEFAULTS = {
  requestTimeoutMs: 60_000,
  headersTimeoutMs: 30_000,
  keepAliveTimeoutMs: 60_000,
};

export type SchedulerEvent =
  | {
      type: 'swarm-created';
      model: string;
      pieces: number;
      bytes: number;
      units: number;
      unitPieces: number;
      /** How the swarm is planned (SwarmService.plan). */
      plan: string;
    }
  | { type: 'host-registered'; model: string; host: number; name: string; held: number }
  | { type: 'host-left'; model: string; host: number }
  | { type: 'swarm-replanned'; model: string; plan: string };

export interface SchedulerServer {
  url: string;
  swarms: ReadonlyMap<string, SwarmService>;
  close(): Promise<void>;
}

const TICK_MS = 100;
/** The answer to a heartbeat sync when nothing else is waiting for the host. */
const HEARTBEAT_REPLY = encodeFrame({ assignments: [], cancellations: [] });

function isHeartbeat(message: {
  reports: readonly unknown[];
  ending?: readonly unknown[] | undefined;
  urgent?: readonly unknown[] | undefined;
}): boolean {
  return (
    message.reports.length === 0 && (message.ending?.length ?? 0) === 0 && (message.urgent?.length ?? 0) === 0
  );
}

export async function startScheduler(options: SchedulerOptions = {}): Promise<SchedulerServer> {
  const serviceOptions: SwarmServiceOptions = {
    ...SWARM_SERVICE_DEFAULTS,
    ...Object.fromEntries(
      Object.entries(options).filter(([key, value]) => key in SWARM_SERVICE_DEFAULTS && value !== undefined),
    ),
  };
  assertListenAllowed(
    options.host ?? '127.0.0.1',
    options.credentials ?? {},
    options.insecure === true,
    'the scheduler',
  );
  const swarmsMax = options.swarmsMax ?? 64;
  const hostsMax = options.hostsMax ?? 4096;
  const swarms = new Map<string, SwarmService>();
  const started = performance.now();
  const now = (): number => performance.now() - started;
  const openSyncs = new Set<ServerResponse>();
  const channels = new Set<Socket>();
  /**
   * The open channel of each host (by swarm and host id), with the way to retire it. A host has at
   * most one: a second channel for the same host replaces the first, whose parked wake-up would
   * otherwise re-park and wake the new one, and so on forever (each park wakes the waker it
   * replaces), holding the scheduler's event loop at 100 % CPU.
   */
  const channelOfHost = new Map<string, { socket: Socket; retire: () => void }>();
  /** Set once the scheduler closes: its channels closing then are not their hosts leaving. */
  let closing = false;

  const gate = new Gate(options.credentials);

  const handle = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const url = new URL(req.url ?? '/', 'http://scheduler');
    const parts = url.pathname.split('/').filter((part) => part.length > 0);
    if (req.method === 'GET' && url.pathname === '/healthz') return sendJson(res, 200, { ok: true });
    // Every other route needs a credential, checked before a body is read.
    const role = gate.authorize(req, 'member');
    if (parts[0] === 'v1' && parts[1] === 'catalog' && options.catalog)
      return options.catalog(req, res, role);
    if (parts[0] !== 'v1' || parts[1] !== 'swarms' || parts[2] === undefined) {
      return sendJson(res, 404, { code: 'NOT_FOUND', message: `no route ${req.method} ${url.pathname}` });
    }
    const model = parseMessage(modelHex, parts[2], 'model name');
    if (req.method === 'GET' && parts.length === 3) return sendJson(res, 200, swarmOf(model).status());
    if (parts[3] !== 'hosts') return sendJson(res, 404, { code: 'NOT_FOUND', message: 'no such route' });
    if (req.method === 'POST' && parts.length === 4) return register(model, req, res);
    const host = Number(parts[4]);
    if (!Number.isInteger(host) || host < 0) throw new WeightcastError('SWARM_PROTOCOL', 'bad host id');
    if (req.method === 'POST' && parts[5] === 'sync' && parts.length === 6)
      return sync(model, host, req, res);
    if (req.method === 'DELETE' && parts.length === 5) {
      swarmOf(model).leave(now(), host);
      options.onEvent?.({ type: 'host-left', model, host });
      res.writeHead(204).end();
      return;
    }
    sendJson(res, 404, { code: 'NOT_FOUND', message: `no route ${req.method} ${url.pathname}` });
  };

  const swarmOf = (model: string): SwarmService => {
    const swarm = swarms.get(model);
    if (swarm === undefined) {
      throw new WeightcastError(
        'SWARM_UNKNOWN_MODEL',
        `no swarm for model ${model}; register with its manifest`,
      );
    }
    return swarm;
  };

  const register = async (model: string, req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const message = parseMessage(registerSchema, await readJsonBody(req), 'register');
    let swarm = swarms.get(model);
    if (swarm === undefined) {
      if (message.manifest === undefined) {
        throw new WeightcastError(
          'SWARM_UNKNOWN_MODEL',
          `no swarm for model ${model}; register with its manifest`,
        );
      }
      // The roots are not checked again here: the scheduler uses only the pieces, never passes the
      // manifest on, and keys the swarm by the digest it computes itself; each agent checked the roots
      // before it registered. At 65,536 pieces the check held the model's first registration, and
      // every agent's first piece, ~0.1 s longer (bench/agent-start.js --sparse-gib 32 --piece-kib 512).
      const manifest = parseManifest(message.manifest, 'the registered manifest', { merkleRoots: 'skip' });
      const digest = manifestDigest(manifest);
      if (digest !== `sha256:${model}`) {
        throw new WeightcastError(
          'MANIFEST_DIGEST_MISMATCH',
          `manifest digest is ${digest}, not sha256:${model}`,
        );
      }
      if (swarms.size >= swarmsMax) {
        throw new WeightcastError('LIMIT_EXCEEDED', `the scheduler already serves ${swarmsMax} models`);
      }
      const map = new PieceMap(manifest);
      swarm = new SwarmService(model, map, serviceOptions);
      swarms.set(model, swarm);
      options.onEvent?.({
        type: 'swarm-created',
        model,
        pieces: map.pieceCount,
        bytes: map.totalBytes,
        units: swarm.units.count,
        unitPieces: swarm.units.unitPieces,
        plan: swarm.plan,
      });
    }
    if (swarm.hostCount >= hostsMax)
      throw new WeightcastError('SWARM_BUSY', `the swarm already has ${hostsMax} hosts`);
    const planned = swarm.plan;
    const registered = swarm.register(now(), message);
    options.onEvent?.({
      type: 'host-registered',
      model,
      host: registered.host,
      name: message.name,
      held: swarm.core.heldCount(registered.host),
    });
    // A swarm that outgrew its chain goes per piece: worth a line of its own.
    if (swarm.plan !== planned) options.onEvent?.({ type: 'swarm-replanned', model, plan: swarm.plan });
    sendJson(res, 200, registered);
  };

  const sync = async (
    model: string,
    host: number,
    req: IncomingMessage,
    res: ServerResponse,
  ): Promise<void> => {
    const message = parseMessage(syncSchema, await readJsonBody(req), 'sync');
    const swarm = swarmOf(model);
    swarm.sync(now(), host, message);
    if (swarm.hasReply(host) || message.waitMs === 0) return sendJson(res, 200, swarm.takeReply(host));
    // Nothing to do yet: hold the request until work appears, the wait ends, or the agent hangs up.
    openSyncs.add(res);
    await new Promise<void>((resolve) => {
      const finish = (): void => {
        clearTimeout(timer);
        res.off('close', finish);
        swarm.unpark(host, finish);
        openSyncs.delete(res);
        resolve();
      };
      const timer = setTimeout(finish, message.waitMs);
      res.on('close', finish);
      swarm.park(host, finish);
    });
    swarm.touch(now(), host);
    if (res.destroyed) return;
    try {
      sendJson(res, 200, swarm.takeReply(host));
    } catch (error) {
      sendError(res, error);
    }
  };

  /**
   * A sync channel (see wire/sync-channel.ts): frames in are syncs, frames out are replies, pushed
   * whenever the host has work; the host stays parked for the channel's life.
   */
  const openChannel = (req: IncomingMessage, socket: Socket, head: Buffer): void => {
    const url = new URL(req.url ?? '/', 'http://scheduler');
    const parts = url.pathname.split('/').filter((part) => part.length > 0);
    const routed =
      parts.length === 6 &&
      parts[0] === 'v1' &&
      parts[1] === 'swarms' &&
      parts[3] === 'hosts' &&
      parts[5] === 'channel';
    if (!routed || req.headers.upgrade?.toLowerCase() !== CHANNEL_PROTOCOL) {
      throw new WeightcastError('SWARM_PROTOCOL', `no channel at ${url.pathname}`);
    }
    const model = parseMessage(modelHex, parts[2], 'model name');
    const swarm = swarmOf(model);
    const host = Number(parts[4]);
    const registration = Number.isInteger(host) && host >= 0 ? swarm.registrationOf(host) : undefined;
    if (registration === undefined) {
      throw new WeightcastError(
        'SWARM_UNKNOWN_HOST',
        `host ${parts[4]} is not registered in this swarm; register again`,
      );
    }
    socket.setNoDelay(true);
    socket.write(
      `HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: ${CHANNEL_PROTOCOL}\r\n\r\n`,
    );
    channels.add(socket);
    let retired = false;
    const fail = (error: unknown): void => {
      retired = true;
      if (!socket.destroyed) socket.end(errorFrame(error));
    };
    const stale = (): boolean => {
      if (retired) return true;
      if (swarm.registrationOf(host) === registration) return false;
      fail(
        new WeightcastError('SWARM_UNKNOWN_HOST', `host ${host} registered again or left; register again`),
      );
      return true;
    };
    // Answers whatever is waiting for the host, then waits for more (parked again on the next
    // microtask: a wake may come from inside `park` itself).
    const wake = (): void => {
      if (socket.destroyed || stale()) return;
      try {
        if (swarm.hasReply(host)) socket.write(encodeFrame(swarm.takeReply(host)));
        queueMicrotask(() => {
          if (socket.destroyed || stale()) return;
          try {
            swarm.park(host, wake);
          } catch (error) {
            fail(error);
          }
        });
      } catch (error) {
        fail(error);
      }
    };
    const reader = new FrameReader();
    const onData = (chunk: Buffer): void => {
      try {
        for (const frame of reader.push(chunk)) {
          if (stale()) return;
          const message = parseMessage(syncSchema, frame, 'sync');
          swarm.sync(now(), host, message);
          if (swarm.hasReply(host)) socket.write(encodeFrame(swarm.takeReply(host)));
          // A heartbeat is answered, so an agent can tell a silent scheduler from an idle one.
          else if (isHeartbeat(message)) socket.write(HEARTBEAT_REPLY);
        }
      } catch (error) {
        fail(error);
      }
    };
    socket.on('data', onData);
    socket.on('error', () => socket.destroy());
    // The agent's end of the channel closed (it stopped, or died: the kernel closes its sockets).
    // Left half-open, the socket would never close, and the registration would wait for the timeout.
    socket.on('end', () => socket.destroy());
    const key = `${model}/${host}`;
    const previous = channelOfHost.get(key);
    channelOfHost.set(key, {
      socket,
      retire: () => {
        swarm.unpark(host, wake);
        fail(new WeightcastError('SWARM_PROTOCOL', `another sync channel opened for host ${host}`));
      },
    });
    previous?.retire();
    socket.on('close', () => {
      channels.delete(socket);
      retired = true;
      const current = channelOfHost.get(key)?.socket === socket;
      if (current) channelOfHost.delete(key);
      swarm.unpark(host, wake);
      // An agent whose channel breaks registers again under a new id, and one that died never comes
      // back: either way this registration is over. Dropped now, its transfers free their origin
      // readers and upload slots at once instead of after the host timeout (10 s). A channel
      // replaced by another for the same registration, or closed by the scheduler's own close, is
      // not an end.
      if (current && !closing && swarm.registrationOf(host) === registration) swarm.leave(now(), host);
    });
    swarm.touch(now(), host);
    wake();
    if (head.length > 0) onData(head);
  };

  const server: Server = createLimitedServer(
    resolveLimits(options.limits, SCHEDULER_LIMIT_DEFAULTS),
    (req, res) => {
      handle(req, res).catch((error: unknown) => sendError(res, error));
    },
    { create: (serverOptions, listener) => createServiceServer(options.tls, serverOptions, listener) },
  );
  server.on('upgrade', (req: IncomingMessage, socket: Socket, head: Buffer) => {
    try {
      gate.authorize(req, 'member');
      openChannel(req, socket, head);
    } catch (error) {
      const status = error instanceof WeightcastError ? statusOf(error.code) : 500;
      const body = JSON.stringify({
        code: error instanceof WeightcastError ? error.code : 'INTERNAL',
        message: error instanceof Error ? error.message : String(error),
      });
      socket.end(
        `HTTP/1.1 ${status} Refused\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
      );
    }
  });
  const ticker = setInterval(() => {
    const t = now();
    for (const swarm of swarms.values()) swarm.tick(t);
  }, TICK_MS);
  ticker.unref();
  await listenOn(server, options.host ?? '127.0.0.1', options.port ?? 0);
  const address = server.address() as AddressInfo;
  const hostPart = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  return {
    url: `${schemeOf(options.tls)}://${hostPart}:${address.port}`,
    swarms,
    close: async () => {
      closing = true;
      clearInterval(ticker);
      for (const res of openSyncs) res.destroy();
      for (const socket of channels) socket.destroy();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
