/**
 * Runs the file server in a process of its own, so a benchmark can keep the origin's CPU apart from
 * the client it measures: `node dist/src/origin/file-server-main.js --root DIR [--port P] [--host H]
 * [--token T] [--rate-mbps R]` prints `{"url": "..."}` as one JSON line once it listens, and stops on SIGINT/SIGTERM.
 * `weightcast serve DIR` is the same server with the same flags; this entry point stays for the
 * benchmarks and tests that spawn it.
 */

import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { WeightcastError } from '../errors.js';
import { mbpsToBytesPerSecond } from '../util/throttle.js';
import { startFileServer, type FileServer, type FileServerOptions } from './file-server.js';

export function parseFileServerArgs(argv: readonly string[]): FileServerOptions {
  const { values } = parseArgs({
    args: [...argv],
    options: {
      root: { type: 'string' },
      port: { type: 'string' },
      host: { type: 'string' },
      token: { type: 'string' },
      'rate-mbps': { type: 'string' },
    },
    strict: true,
  });
  if (values.root === undefined) throw new WeightcastError('USAGE', 'file server: --root DIR is required');
  return fileServerOptions({
    root: values.root,
    ...(values.port === undefined ? {} : { port: values.port }),
    ...(values.host === undefined ? {} : { host: values.host }),
    ...(values.token === undefined ? {} : { token: values.token }),
    ...(values['rate-mbps'] === undefined ? {} : { rateMbps: values['rate-mbps'] }),
  });
}

/** The server's options from flag text, checked; shared with `weightcast serve`. */
export function fileServerOptions(flags: {
  root: string;
  port?: string;
  host?: string;
  token?: string;
  rateMbps?: string;
}): FileServerOptions {
  const port = flags.port === undefined ? 0 : Number(flags.port);
  if (flags.port?.trim() === '' || !Number.isInteger(port) || port < 0 || port > 65535) {
    throw new WeightcastError('USAGE', `file server: --port must be 0-65535, got ${flags.port}`);
  }
  const rateMbps = flags.rateMbps === undefined ? undefined : Number(flags.rateMbps);
  if (rateMbps !== undefined && !(Number.isFinite(rateMbps) && rateMbps > 0)) {
    throw new WeightcastError(
      'USAGE',
      `file server: --rate-mbps must be a positive number, got ${flags.rateMbps}`,
    );
  }
  return {
    ...(rateMbps === undefined ? {} : { rateBytesPerSecond: mbpsToBytesPerSecond(rateMbps) }),
    root: flags.root,
    port,
    ...(flags.host === undefined ? {} : { host: flags.host }),
    ...(flags.token === undefined ? {} : { token: flags.token }),
  };
}

/**
 * Starts the server and announces its URL on `out`. The first SIGINT or SIGTERM closes it; so does
 * the returned handle's `close`, which also forgets the signal handlers.
 */
export async function main(
  argv: readonly string[],
  out: (line: string) => void = (line) => process.stdout.write(line),
): Promise<FileServer> {
  const server = await startFileServer(parseFileServerArgs(argv));
  const close = (): Promise<void> => {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    return server.close();
  };
  const onSignal = (): void => {
    close().catch(() => undefined);
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  out(JSON.stringify({ url: server.url }) + '\n');
  return { ...server, close };
}

const invokedPath = process.argv[1];
if (invokedPath !== undefined && import.meta.url === pathToFileURL(invokedPath).href) {
  main(process.argv.slice(2)).catch((error: unknown) => {
    process.stderr.write(`${error instanceof Error ? error.message : String(error)}\n`);
    process.exitCode = 1;
  });
}
