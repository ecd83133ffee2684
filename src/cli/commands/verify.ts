/** `weightcast verify DIR --manifest FILE`: which files and pieces of a local copy are bad. */

import { loadManifest } from '../../manifest/manifest.js';
import { EXTRA_FILES_MAX, verifyDirectory } from '../../manifest/verify.js';
import { formatBytes } from '../../util/units.js';
import { EXIT_FAILURE, reportError, type CliIo } from '../io.js';
import { createProgress } from '../progress.js';

export interface VerifyFlags {
  manifest: string;
  digest?: string;
  json?: boolean;
}

export async function verifyCommand(dir: string, flags: VerifyFlags, io: CliIo): Promise<number> {
  const json = flags.json === true;
  const progress = createProgress(io, 'verifying', json);
  try {
    const manifest = await loadManifest(flags.manifest, {
      signal: io.signal,
      ...(flags.digest !== undefined ? { expectDigest: flags.digest } : {}),
    });
    const report = await verifyDirectory(dir, manifest, {
      signal: io.signal,
      onProgress: (done, total) => progress.update(done, total),
    });
    progress.finish();
    if (json) {
      io.stdout(JSON.stringify({ event: 'verify', ...report }) + '\n');
    } else {
      for (const file of report.files) {
        const detail =
          file.verdict === 'corrupt'
            ? `${file.badPieces.length} bad ${file.badPieces.length === 1 ? 'piece' : 'pieces'}: ${file.badPieces.slice(0, 20).join(', ')}${file.badPieces.length > 20 ? ', …' : ''}`
            : file.verdict === 'size-mismatch'
              ? `size ${file.actualSize ?? '?'} bytes, expected ${file.expectedSize}`
              : file.verdict === 'not-a-file'
                ? `not a regular file, expected ${file.expectedSize} bytes`
                : formatBytes(file.expectedSize);
        io.stdout(`${file.verdict.padEnd(13)} ${file.path}  ${detail}\n`);
      }
      if (report.extraFiles.length > 0) io.stdout(extraFilesNote(dir, report.extraFiles));
      const bad = report.files.filter((f) => f.verdict !== 'ok').length;
      io.stdout(
        report.ok
          ? `verified: all ${report.files.length} files match\n`
          : `FAILED: ${bad} of ${report.files.length} files are bad\n`,
      );
    }
    return report.ok ? 0 : EXIT_FAILURE;
  } catch (error) {
    progress.finish();
    return reportError(io, error, json);
  }
}

const EXTRA_FILES_SHOWN = 20;

/** A note, not a failure: files the manifest does not name do not make the copy bad. */
function extraFilesNote(dir: string, extra: readonly string[]): string {
  const count = extra.length >= EXTRA_FILES_MAX ? `${EXTRA_FILES_MAX} or more` : String(extra.length);
  const shown =
    extra.slice(0, EXTRA_FILES_SHOWN).join(', ') + (extra.length > EXTRA_FILES_SHOWN ? ', …' : '');
  return `note: ${count} ${extra.length === 1 ? 'file' : 'files'} in ${dir} not in the manifest (not checked): ${shown}\n`;
}
