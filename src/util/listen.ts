/**
 * Starting to listen, for every service (the scheduler, agents, the file server of `serve`), so a
 * taken port or a bad address reads the same whichever it is.
 */

import type { Server } from 'node:net';
import { WeightcastError } from '../errors.js';

/** Starts listening; a taken port or a bad address becomes an IO error naming them. */
export async function listenOn(server: Server, host: string, port: number): Promise<void> {
  await new Promise<void>((resolve, reject) => {
    const onError = (error: Error): void =>
      reject(
        new WeightcastError('IO', `cannot listen on ${host}:${port}: ${error.message}`, {}, { cause: error }),
      );
    server.once('error', onError);
    server.listen(port, host, () => {
      server.off('error', onError);
      resolve();
    });
  });
}
