/** `weightcast pull SRC --to DIR` from the origin itself (or the seed tier): verified, resumable, memory-bounded. */

import { errorEntry, isWeightcastError } from '../../errors.js';
import { loadManifest, type Manifest } from '../../manifest/manifest.js';
import { CONCURRENCY_DEFAULT, pull, type PullEvent } from '../../pull/pull.js';
import type * as SeedRead from '../../seed/read/open.js';
import {
  countOf,
  formatBytes,
  formatRate,
  formatSeconds,
  parseByteSize,
  parsePositiveInt,
} from '../../util/units.js';
import { SEED_READS_PER_NODE } from '../definitions/pull.js';
import { reportError, type CliIo } from '../io.js';
import { createProgress, type Progress } from '../progress.js';
import type { PullFlags } from './pull.js';
import type { ServiceAccess } from '../../auth/transport.js';
import { openSource } from './shared.js';
import { peakRssBytes } from '../../util/peak-rss.js';

const SEED_READS_MAX = 64;

/** `--seeds`: the seed tier's reader (and undici under it), loaded only when asked for. */
async function openSeedSource(
  ...args: Parameters<typeof SeedRead.openSeedSource>
): ReturnType<typeof SeedRead.openSeedSource> {
  const { openSeedSource } = await import('../../seed/read/open.js');
  return openSeedSource(...args);
}

/** The cluster credential (and TLS) for the catalog and the seed nodes; the TLS for an https:// origin. */
async function clientAccess(flags: PullFlags): Promise<ServiceAccess> {
  const { resolveAccess } = await import('../../auth/credentials.js');
  return (await resolveAccess(flags)).client;
}

export async function pullCommand(src: string, flags: PullFlags, io: CliIo): Promise<number> {
  const json = flags.json === true;
  const progress = createProgress(io, 'pulling', json);
  try {
    const memoryBytes = parsePositiveInt(flags.memoryMb, '--memory-mb') * 1024 * 1024;
    const pieceSize =
      flags.pieceSize === undefined ? undefined : parseByteSize(flags.pieceSize, '--piece-size');
    let manifest: Manifest | undefined;
    if (flags.manifest !== undefined) {
      manifest = await loadManifest(flags.manifest, {
        signal: io.signal,
        ...(flags.digest !== undefined ? { expectDigest: flags.digest } : {}),
      });
    }
    const seeded =
      flags.seeds === undefined
        ? undefined
        : await openSeedSource(src, flags.seeds, manifest, io.signal, await clientAccess(flags));
    manifest = seeded?.manifest ?? manifest;
    // From the seed tier every node's link is a path of its own: keep a few reads on each.
    const concurrency =
      flags.concurrency !== undefined
        ? parsePositiveInt(flags.concurrency, '--concurrency')
        : seeded !== undefined
          ? Math.min(SEED_READS_MAX, SEED_READS_PER_NODE * seeded.origin.primaryNodes)
          : CONCURRENCY_DEFAULT;
    const files = manifest?.files.map((f) => ({ path: f.path, size: f.size }));
    // An https:// origin signed by a private CA (weightcast serve --tls-cert, say): --tls-ca trusts it.
    const tls =
      seeded === undefined && /^https:\/\//i.test(src) && (flags.tlsCa ?? flags.tlsCert) !== undefined
        ? (await clientAccess(flags)).tls
        : undefined;
    const origin =
      seeded?.origin ??
      openSource(src, { ...flags, connections: concurrency, tls, ...(files ? { files } : {}) }, progress);
    const started = performance.now();
    try {
      const result = await pull(origin, flags.to, {
        concurrency,
        memoryBytes,
        ...(flags.directIo === false ? { directIo: false } : {}),
        signal: io.signal,
        onEvent: (event) => onPullEvent(event, progress, io, json),
        ...(manifest !== undefined ? { manifest } : {}),
        ...(pieceSize !== undefined ? { pieceSize } : {}),
      });
      progress.finish();
      const seconds = (performance.now() - started) / 1000;
      const summary = {
        event: 'done',
        verified: !result.trust,
        trustedOrigin: result.trust,
        digest: result.manifestDigest,
        files: result.manifest.files.length,
        bytes: result.bytesTotal,
        bytesFetched: result.bytesFetched,
        piecesFetched: result.piecesFetched,
        piecesReused: result.piecesReused,
        piecesRejected: result.piecesRejected,
        seconds,
        bytesPerSecond: seconds > 0 ? Math.round(result.bytesFetched / seconds) : null,
        peakRssBytes: peakRssBytes(),
        to: flags.to,
      };
      if (json) io.stdout(JSON.stringify(summary) + '\n');
      else {
        const check = result.trust
          ? 'every piece hashed; checked against a manifest built from the origin itself (the origin is trusted)'
          : 'every piece verified against the manifest';
        io.stdout(
          `pulled ${countOf(result.manifest.files.length, 'file')}, ${formatBytes(result.bytesTotal)} into ${flags.to} in ${formatSeconds(seconds)} ` +
            `(${formatRate(result.bytesFetched, seconds)} fetched; ${countOf(result.piecesReused, 'piece')} reused, ${result.piecesRejected} rejected)\n` +
            `${check}\nmodel ${result.manifestDigest}` +
            // A manifest built here has the pull's piece size: its name is that of `weightcast
            // manifest` with the same --piece-size, which otherwise picks one by the model's size.
            (result.trust
              ? ` (pieces of ${formatBytes(result.manifest.pieceSize)}: \`weightcast manifest --piece-size ${formatBytes(result.manifest.pieceSize).replace(' ', '')}\` gives the same name)\n`
              : '\n'),
        );
      }
      return 0;
    } finally {
      await origin.close();
    }
  } catch (error) {
    progress.finish();
    const code = reportError(io, error, json);
    if (!json && isWeightcastError(error) && errorEntry(error.code).resumable === true) {
      io.stderr('weightcast: verified pieces are kept; run the same command again to continue\n');
    }
    return code;
  }
}

function onPullEvent(event: PullEvent, progress: Progress, io: CliIo, json: boolean): void {
  const line = (text: string, data: object): void => {
    if (json) io.stdout(JSON.stringify({ event: event.type, ...data }) + '\n');
    else progress.log(text);
  };
  switch (event.type) {
    case 'plan':
      progress.startFrom(event.bytesReused);
      if (event.trust) {
        line(
          'weightcast: no --manifest given: pieces are hashed but can only be checked against the origin itself (this trusts the origin)',
          event,
        );
      }
      if (event.piecesReused > 0)
        line(
          `weightcast: resuming: ${event.piecesReused} of ${event.piecesTotal} pieces already verified`,
          event,
        );
      else if (json) line('', event);
      break;
    case 'state-discarded':
      line(`weightcast: discarding an unrelated partial download: ${event.reason}`, event);
      break;
    case 'piece-rejected':
      line(
        `weightcast: rejected ${event.path} piece ${event.piece} (attempt ${event.attempt}): ${event.reason}`,
        event,
      );
      break;
    case 'progress':
      progress.update(event.bytesDone, event.bytesTotal);
      break;
    case 'file-complete':
      if (json) line('', event);
      break;
  }
}
