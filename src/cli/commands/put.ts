/** `weightcast put SRC --scheduler URL`: loads a model into the seed tier, placed by policy. */

import { resolveAccess, type AccessFlags } from '../../auth/credentials.js';
import { WeightcastError } from '../../errors.js';
import { buildManifest } from '../../manifest/build.js';
import { loadManifest, manifestDigest, type Manifest } from '../../manifest/manifest.js';
import { isPlacementPolicy, PLACEMENT_POLICIES, reportLayout } from '../../seed/plan/index.js';
import { putModel } from '../../seed/put/put.js';
import { formatBytes, formatSeconds, parseByteSize, parsePositiveInt } from '../../util/units.js';
import { reportError, type CliIo } from '../io.js';
import { createProgress } from '../progress.js';
import { openSource } from './shared.js';

export interface PutFlags extends AccessFlags {
  scheduler: string;
  placement: string;
  replicas: string;
  manifest?: string;
  pieceSize?: string;
  concurrency: string;
  nodeUploads: string;
  seed: string;
  token?: string;
  originRetryS?: string;
  json?: boolean;
}

export async function putCommand(src: string, flags: PutFlags, io: CliIo): Promise<number> {
  const json = flags.json === true;
  const progress = createProgress(io, 'put', json);
  try {
    if (!isPlacementPolicy(flags.placement)) {
      throw new WeightcastError('USAGE', `--placement must be one of ${PLACEMENT_POLICIES.join(', ')}`);
    }
    const replicas = Number(flags.replicas);
    if (!Number.isSafeInteger(replicas) || replicas < 0) {
      throw new WeightcastError('USAGE', `--replicas must be a non-negative integer, got ${flags.replicas}`);
    }
    const concurrency = parsePositiveInt(flags.concurrency, '--concurrency');
    const access = (await resolveAccess(flags, { sendOperator: true })).client;
    const started = performance.now();
    let manifest: Manifest | undefined =
      flags.manifest === undefined ? undefined : await loadManifest(flags.manifest, { signal: io.signal });
    const files = manifest?.files.map((file) => ({ path: file.path, size: file.size }));
    const origin = openSource(
      src,
      { ...flags, connections: concurrency, ...(files ? { files } : {}) },
      progress,
    );
    try {
      if (manifest === undefined) {
        if (!json)
          progress.log(
            'weightcast: no --manifest given: building one from the origin (this trusts the origin)',
          );
        manifest = await buildManifest(origin, {
          ...(flags.pieceSize === undefined
            ? {}
            : { pieceSize: parseByteSize(flags.pieceSize, '--piece-size') }),
          signal: io.signal,
        });
      }
      const result = await putModel({
        schedulerUrl: flags.scheduler,
        access,
        origin,
        manifest,
        policy: flags.placement,
        replicas,
        seed: parsePositiveInt(flags.seed, '--seed'),
        concurrency,
        nodeUploads: parsePositiveInt(flags.nodeUploads, '--node-uploads'),
        signal: io.signal,
        onEvent: (event) => {
          if (event.type === 'progress') progress.update(event.bytesDone, event.bytesTotal);
          else if (json) io.stdout(JSON.stringify({ event: event.type, ...event }) + '\n');
          else if (event.type === 'placement')
            progress.log(
              `weightcast: ${event.pieces} pieces over ${event.nodes.length} seed nodes; sending ${event.piecesToSend} pieces (${formatBytes(event.bytesToSend)})`,
            );
          else
            progress.log(
              `weightcast: piece ${event.piece} failed verification at the origin (attempt ${event.attempt})`,
            );
        },
      });
      progress.finish();
      const report = reportLayout({
        model: result.model,
        nodes: result.snapshot.nodes,
        pieces: result.snapshot.pieces,
      });
      const seconds = (performance.now() - started) / 1000;
      if (json) {
        io.stdout(
          JSON.stringify({
            event: 'done',
            model: manifestDigest(manifest),
            alreadyPresent: result.alreadyPresent,
            piecesSent: result.piecesSent,
            bytesSent: result.bytesSent,
            seconds,
            layout: report,
          }) + '\n',
        );
      } else {
        io.stdout(
          (result.alreadyPresent
            ? `model ${manifestDigest(manifest)} is already in the seed tier; nothing sent\n`
            : `put ${result.piecesSent} pieces (${formatBytes(result.bytesSent)}) into the seed tier in ${formatSeconds(seconds)}; every piece verified\n` +
              `model ${manifestDigest(manifest)}\n`) +
            `${report.measuredNodes} nodes, busiest ${report.busiestNode} ${report.busiestPieces} pieces, read efficiency ${report.readEfficiency.toFixed(2)}\n`,
        );
      }
      return 0;
    } finally {
      await origin.close();
    }
  } catch (error) {
    progress.finish();
    return reportError(io, error, json);
  }
}
