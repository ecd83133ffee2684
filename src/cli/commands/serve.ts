/**
 * `weightcast serve DIR`: the ranged HTTP file server of the tests and benchmarks
 * (src/origin/file-server.ts) until Ctrl-C. It prints `{"url": "..."}` once it listens, the line
 * `node dist/src/origin/file-server-main.js` prints, so scripts can read either.
 */

import { stat } from 'node:fs/promises';
import { WeightcastError } from '../../errors.js';
import { startFileServer } from '../../origin/file-server.js';
import { serverTlsFrom } from '../../auth/credentials.js';
import { fileServerOptions } from '../../origin/file-server-main.js';
import { EXIT_OK, reportError, untilInterrupted, type CliIo } from '../io.js';
import { serverLimitsFromFlags, type ServerLimitFlags } from '../server-limit-flags.js';
import { listenError } from './shared.js';

export interface ServeFlags extends ServerLimitFlags {
  port: string;
  host: string;
  token?: string;
  rateMbps?: string;
  tlsCert?: string;
  tlsKey?: string;
}

export async function serveCommand(dir: string, flags: ServeFlags, io: CliIo): Promise<number> {
  try {
    const tls = await serverTlsFrom(flags);
    const options = {
      ...fileServerOptions({ root: dir, ...flags }),
      limits: serverLimitsFromFlags(flags),
      ...(tls === undefined ? {} : { tls }),
    };
    // A missing directory would otherwise be a server that answers 404 to everything.
    const isDirectory = await stat(dir).then(
      (stats) => stats.isDirectory(),
      () => false,
    );
    if (!isDirectory) throw new WeightcastError('USAGE', `serve: ${dir} is not a directory`);
    const server = await startFileServer(options).catch((error: unknown) => {
      throw listenError(error, flags.host);
    });
    try {
      io.stdout(JSON.stringify({ url: server.url }) + '\n');
      await untilInterrupted(io);
    } finally {
      await server.close();
    }
    return EXIT_OK;
  } catch (error) {
    return reportError(io, error, false);
  }
}
