/**
 * Whole-file SHA-256 of a model as the seed tier serves it (read through the catalog's map, every
 * piece also checked against the manifest): the before / after table of `distribute --apply`.
 */

import { createHash } from 'node:crypto';
import type { ServiceAccess } from '../../auth/transport.js';
import { WeightcastError } from '../../errors.js';
import type { Manifest } from '../../manifest/manifest.js';
import { SeedOrigin } from '../read/seed-origin.js';
import { pieceDigest } from '../../piece/verify.js';

export interface FileHash {
  path: string;
  size: number;
  sha256: string;
  /** Pieces whose bytes did not match the manifest (0 on a healthy tier). */
  badPieces: number;
}

const READ_AHEAD = 4;

export async function tierFileHashes(
  schedulerUrl: string,
  hex: string,
  manifest: Manifest,
  signal?: AbortSignal,
  access: ServiceAccess = {},
): Promise<FileHash[]> {
  const origin = await SeedOrigin.open(hex, {
    schedulerUrl,
    manifest,
    access,
    ...(signal === undefined ? {} : { signal }),
  });
  try {
    const out: FileHash[] = [];
    for (const file of manifest.files) {
      const hash = createHash('sha256');
      let badPieces = 0;
      const read = async (piece: number): Promise<Buffer> => {
        const start = piece * manifest.pieceSize;
        const buffer = Buffer.allocUnsafe(Math.min(manifest.pieceSize, file.size - start));
        await origin.readInto(file.path, start, buffer, signal === undefined ? {} : { signal });
        return buffer;
      };
      const inFlight: Promise<Buffer>[] = [];
      let next = 0;
      for (let consumed = 0; consumed < file.pieces.length; consumed++) {
        while (next < file.pieces.length && inFlight.length < READ_AHEAD) {
          const pending = read(next++);
          // A read that fails while an earlier one is awaited is reported through that await.
          pending.catch(() => undefined);
          inFlight.push(pending);
        }
        const bytes = await (inFlight.shift() as Promise<Buffer>);
        if (pieceDigest(bytes) !== file.pieces[consumed]) badPieces++;
        hash.update(bytes);
      }
      out.push({ path: file.path, size: file.size, sha256: hash.digest('hex'), badPieces });
    }
    return out;
  } catch (error) {
    throw new WeightcastError(
      'SEED_APPLY_FAILED',
      `could not read the model back from the seed tier: ${(error as Error).message}`,
      {},
      { cause: error },
    );
  } finally {
    await origin.close();
  }
}
