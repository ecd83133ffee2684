/** `weightcast scheduler --port P`: runs the swarm scheduler until Ctrl-C. */

import { resolveAccess, type AccessFlags } from '../../auth/credentials.js';
import { WeightcastError } from '../../errors.js';
import { startScheduler } from '../../swarm/scheduler/scheduler-server.js';
import { parsePositiveInt } from '../../util/units.js';
import { reportError, serveUntilInterrupted, type CliIo } from '../io.js';
import { parseHedgeTail, parseRingParents, parseTransferUnit } from '../swarm-flags.js';
import { serverLimitsFromFlags, type ServerLimitFlags } from '../server-limit-flags.js';
import { listenError } from './shared.js';
import type { CatalogRoutes } from '../../seed/catalog/routes.js';
import type { CatalogStore } from '../../seed/catalog/store.js';

export interface SchedulerFlags extends AccessFlags, ServerLimitFlags {
  port: string;
  host: string;
  originReaders: string;
  downloads: string;
  uploads: string;
  hostTimeoutMs: string;
  seed: string;
  ringParents: string;
  hedgeTail: string;
  transferUnit: string;
  ringPush?: boolean;
  ringChain?: boolean;
  perPiece?: boolean;
  catalog?: string;
  json?: boolean;
}

export async function schedulerCommand(flags: SchedulerFlags, io: CliIo): Promise<number> {
  const json = flags.json === true;
  try {
    const port = Number(flags.port);
    if (!Number.isInteger(port) || port < 0 || port > 65535) {
      throw new WeightcastError('USAGE', `--port must be 0-65535, got ${flags.port}`);
    }
    const access = await resolveAccess(flags);
    const catalog = flags.catalog === undefined ? undefined : await openCatalog(flags.catalog);
    const scheduler = await startScheduler({
      credentials: access.credentials,
      ...(access.serverTls === undefined ? {} : { tls: access.serverTls }),
      insecure: access.insecure,
      ...(catalog === undefined ? {} : { catalog: catalog.routes }),
      host: flags.host,
      port,
      originReaders: parsePositiveInt(flags.originReaders, '--origin-readers'),
      downloadsPerHost: parsePositiveInt(flags.downloads, '--downloads'),
      uploadsPerHost: parsePositiveInt(flags.uploads, '--uploads'),
      hedgeTailPieces: parseHedgeTail(flags.hedgeTail),
      hostTimeoutMs: parsePositiveInt(flags.hostTimeoutMs, '--host-timeout-ms'),
      randomSeed: parsePositiveInt(flags.seed, '--seed'),
      ringParents: parseRingParents(flags.ringParents),
      transferUnitPieces: parseTransferUnit(flags.transferUnit),
      ...planFlags(flags),
      limits: serverLimitsFromFlags(flags),
      onEvent: (event) => {
        if (json) io.stdout(JSON.stringify({ event: event.type, ...event }) + '\n');
        else if (event.type === 'swarm-created')
          io.stdout(
            `swarm for model ${event.model.slice(0, 16)}: ${event.pieces} pieces` +
              (event.unitPieces > 1
                ? `, handed out in ${event.units} runs of up to ${event.unitPieces}`
                : '') +
              `; planned ${event.plan}\n`,
          );
        else if (event.type === 'swarm-replanned')
          io.stdout(`swarm for model ${event.model.slice(0, 16)}: planned ${event.plan} from now on\n`);
        else if (event.type === 'host-registered')
          io.stdout(`host ${event.host} (${event.name}) registered holding ${event.held} pieces\n`);
        else io.stdout(`host ${event.host} left\n`);
      },
    }).catch((error: unknown) => {
      throw listenError(error, flags.host);
    });
    await serveUntilInterrupted(io, json, 'scheduler', { url: scheduler.url });
    await scheduler.close();
    await catalog?.store.close();
    return 0;
  } catch (error) {
    return reportError(io, error, json);
  }
}

/** `--catalog DIR`: the seed tier's catalog, whose code a scheduler without one never loads. */
async function openCatalog(dir: string): Promise<{ store: CatalogStore; routes: CatalogRoutes }> {
  const [{ CatalogStore }, { catalogRoutes }] = await Promise.all([
    import('../../seed/catalog/store.js'),
    import('../../seed/catalog/routes.js'),
  ]);
  const store = await CatalogStore.open(dir);
  return { store, routes: catalogRoutes(store) };
}

/**
 * How the scheduler plans: `--per-piece`, `--ring-push` (rings), `--ring-chain` (always one chain),
 * or by default one chain while the swarm is short enough for the model (SwarmServiceOptions.ringAuto).
 */
function planFlags(flags: SchedulerFlags): { ringPush?: true; ringChain?: true; ringAuto?: true } {
  if (flags.perPiece === true && (flags.ringPush === true || flags.ringChain === true))
    throw new WeightcastError(
      'USAGE',
      '--per-piece plans without rings or chains: drop --ring-push and --ring-chain',
    );
  if (flags.perPiece === true) return {};
  if (flags.ringChain === true) return { ringPush: true, ringChain: true };
  if (flags.ringPush === true) return { ringPush: true };
  return { ringAuto: true };
}
