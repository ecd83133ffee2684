/**
 * An undici connector whose TLS options come from `tlsClientOptions` at its first `https:`
 * connection: a client reading over plain http (a redirect's target included) never builds a trust
 * store, which with the launcher's extra certificates costs ~40 ms of CPU. undici itself is passed
 * in, so that this module does not load it.
 */

import type { buildConnector } from 'undici';
import { tlsClientOptions, type ClientTls } from './transport.js';

export function tlsOnDemand(
  build: typeof buildConnector,
  base: buildConnector.BuildOptions,
  tls: ClientTls | undefined,
): buildConnector.connector {
  const plain = build(base);
  let secure: buildConnector.connector | undefined;
  return (options, callback) => {
    if (options.protocol !== 'https:') return plain(options, callback);
    secure ??= build({ ...base, ...tlsClientOptions({ tls }) });
    return secure(options, callback);
  };
}
