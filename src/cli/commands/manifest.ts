/** `weightcast manifest SRC`: hash a model into its content-addressed manifest and print its name. */

import { constants } from 'node:fs';
import { access, stat } from 'node:fs/promises';
import { dirname, resolve } from 'node:path';
import { WeightcastError } from '../../errors.js';
import { buildManifest } from '../../manifest/build.js';
import {
  encodeManifest,
  manifestDigest,
  totalBytes,
  totalPieces,
  writeManifest,
} from '../../manifest/manifest.js';
import {
  countOf,
  formatBytes,
  formatRate,
  formatSeconds,
  parseByteSize,
  parsePositiveInt,
} from '../../util/units.js';
import { hashThreadsMax, HASH_THREADS_PER_CORE_MAX } from '../definitions/manifest.js';
import { reportError, type CliIo } from '../io.js';
import { createProgress } from '../progress.js';
import { openSource } from './shared.js';

export interface ManifestFlags {
  pieceSize?: string;
  out?: string;
  json?: boolean;
  fileSha256?: boolean;
  threads?: string;
  token?: string;
  originRetryS?: string;
}

export async function manifestCommand(src: string, flags: ManifestFlags, io: CliIo): Promise<number> {
  const json = flags.json === true;
  const progress = createProgress(io, 'hashing', json);
  try {
    const pieceSize =
      flags.pieceSize === undefined ? undefined : parseByteSize(flags.pieceSize, '--piece-size');
    const threads = flags.threads === undefined ? undefined : parseThreads(flags.threads);
    if (flags.out !== undefined) await checkWritable(flags.out);
    const origin = openSource(src, flags, progress);
    const started = performance.now();
    try {
      const manifest = await buildManifest(origin, {
        ...(pieceSize !== undefined ? { pieceSize } : {}),
        fileSha256: flags.fileSha256 === true,
        signal: io.signal,
        onProgress: (done, total) => progress.update(done, total),
        ...(threads !== undefined ? { threads } : {}),
      });
      progress.finish();
      const seconds = (performance.now() - started) / 1000;
      const digest =
        flags.out === undefined ? manifestDigest(manifest) : await writeManifest(flags.out, manifest);
      const bytes = totalBytes(manifest);
      const summary = {
        digest,
        files: manifest.files.length,
        bytes,
        pieces: totalPieces(manifest),
        pieceSize: manifest.pieceSize,
        seconds,
      };
      if (json) {
        const document =
          flags.out === undefined
            ? { manifest: JSON.parse(encodeManifest(manifest).toString('utf8')) as unknown }
            : { out: flags.out };
        io.stdout(JSON.stringify({ event: 'manifest', ...summary, ...document }) + '\n');
      } else {
        // Exactly the canonical bytes, no newline: redirected to a file, its SHA-256 is the digest.
        if (flags.out === undefined) io.stdout(encodeManifest(manifest).toString('utf8'));
        const report = (text: string): void => (flags.out === undefined ? io.stderr(text) : io.stdout(text));
        report(
          `${digest}\n${countOf(manifest.files.length, 'file')}, ${formatBytes(bytes)}, ${countOf(summary.pieces, 'piece')} of ${formatBytes(manifest.pieceSize)}; ` +
            `hashed in ${formatSeconds(seconds)} (${formatRate(bytes, seconds)})${flags.out ? `; written to ${flags.out}` : ''}\n`,
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

function parseThreads(text: string): number {
  const threads = parsePositiveInt(text, '--threads');
  const max = hashThreadsMax();
  if (threads > max) {
    throw new WeightcastError(
      'USAGE',
      `--threads ${threads} is more than ${HASH_THREADS_PER_CORE_MAX} per core (${max} on this machine): hashing gains nothing from threads beyond the cores`,
    );
  }
  return threads;
}

/**
 * Refuses an --out that cannot be written before any hashing: a missing or read-only directory, or
 * a directory where the file should go. Hashing a large model first would waste minutes.
 */
async function checkWritable(out: string): Promise<void> {
  const refuse = (why: string): WeightcastError =>
    new WeightcastError('USAGE', `--out ${out}: ${why}`, { file: out });
  const existing = await stat(out).catch(() => undefined);
  if (existing?.isDirectory() === true) throw refuse('is a directory');
  const dir = dirname(resolve(out));
  const parent = await stat(dir).catch(() => undefined);
  if (parent === undefined) throw refuse(`directory ${dir} does not exist`);
  if (!parent.isDirectory()) throw refuse(`${dir} is not a directory`);
  try {
    await access(existing === undefined ? dir : out, constants.W_OK);
  } catch {
    throw refuse(`${existing === undefined ? `directory ${dir}` : 'the file'} is not writable`);
  }
}
