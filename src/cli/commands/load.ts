/**
 * `weightcast load SRC --format hf|shm [--to DIR]`: streams a model's tensors into memory as their
 * bytes arrive (verified against `--manifest` when given) and writes them out: `hf` reproduces the
 * original files byte for byte, `shm` writes safetensors files into a shared-memory directory.
 */

import { basename } from 'node:path';
import type { Command } from 'commander';
import { WeightcastError } from '../../errors.js';
import { loadManifest, type Manifest } from '../../manifest/manifest.js';
import { HF_REQUESTS, HfOutput } from '../../loader/stream/hf-output.js';
import { openLoadStream } from '../../loader/stream/load.js';
import { closeModelSource, modelBytes, openModelSource } from '../../loader/stream/model-source.js';
import { CONCURRENCY_DEFAULT, MEMORY_BYTES_DEFAULT } from '../../loader/stream/read-stream.js';
import { SHM_REQUESTS, SHM_ROOT_DEFAULT, ShmOutput } from '../../loader/stream/shm-output.js';
import { formatBytes, formatRate, formatSeconds, parsePositiveInt } from '../../util/units.js';
import { reportError, type CliIo } from '../io.js';
import { createProgress } from '../progress.js';
import type { RegisterCommand } from './index.js';
import { openSource, withTokenOption } from './shared.js';

const MiB = 1024 * 1024;

interface LoadFlags {
  to?: string;
  format: string;
  memoryMb: string;
  concurrency: string;
  manifest?: string;
  digest?: string;
  token?: string;
  json?: boolean;
}

export const registerLoad: RegisterCommand = (program: Command, io: CliIo, setExitCode) => {
  withTokenOption(program.command('load'))
    .description('Stream a model into memory, tensor by tensor as bytes arrive, and write it out')
    .argument('<src>', 'model directory, file:// or http(s):// URL')
    .option('--to <dir>', `output directory (shm default: ${SHM_ROOT_DEFAULT}/<name>)`)
    .option(
      '--format <format>',
      'hf (original files, byte-identical) or shm (safetensors in shared memory)',
      'shm',
    )
    .option(
      '--memory-mb <mb>',
      'memory budget for bytes in flight and not yet written',
      String(MEMORY_BYTES_DEFAULT / MiB),
    )
    .option('--concurrency <n>', 'ranged reads in flight', String(CONCURRENCY_DEFAULT))
    .option(
      '--manifest <file>',
      'verify every piece against this manifest (without it the origin is trusted)',
    )
    .option('--digest <sha256>', 'refuse the manifest unless its digest is this')
    .option('--json', 'one JSON summary on stdout')
    .action(async (src: string, flags: LoadFlags) => setExitCode(await loadCommand(src, flags, io)));
};

export async function loadCommand(src: string, flags: LoadFlags, io: CliIo): Promise<number> {
  const json = flags.json === true;
  const progress = createProgress(io, 'loading', json);
  try {
    const format = parseFormat(flags.format);
    const memoryBytes = parsePositiveInt(flags.memoryMb, '--memory-mb') * MiB;
    const concurrency = parsePositiveInt(flags.concurrency, '--concurrency');
    if (format === 'hf' && flags.to === undefined)
      throw new WeightcastError('USAGE', '--format hf needs --to DIR');
    const to = flags.to ?? `${SHM_ROOT_DEFAULT}/${outputName(src)}`;
    let manifest: Manifest | undefined;
    if (flags.manifest !== undefined) {
      manifest = await loadManifest(flags.manifest, {
        signal: io.signal,
        ...(flags.digest !== undefined ? { expectDigest: flags.digest } : {}),
      });
    }
    const files = manifest?.files.map((f) => ({ path: f.path, size: f.size }));
    const origin = openSource(
      src,
      { ...flags, connections: concurrency, ...(files ? { files } : {}) },
      progress,
    );
    const started = performance.now();
    const model = await openModelSource(origin, {
      signal: io.signal,
      ...(manifest === undefined ? {} : { manifest }),
    }).catch(async (error: unknown) => {
      await origin.close();
      throw error;
    });
    try {
      if (!json && !model.verified) {
        progress.log(
          'weightcast: no --manifest given: bytes are checked for shape only, the origin is trusted',
        );
      }
      // The stream first: a budget too small for the largest tensor fails before any file is created.
      const stream = openLoadStream(model, format === 'hf' ? HF_REQUESTS : SHM_REQUESTS, {
        memoryBytes,
        concurrency,
        signal: io.signal,
      });
      const output = format === 'hf' ? new HfOutput(to, model) : await ShmOutput.create(to, model);
      const total = stream.plan.bytesRequested;
      let tensors = 0;
      try {
        for await (const delivered of stream) {
          await output.write(delivered);
          if (delivered.request.tag.kind === 'tensor') tensors++;
          progress.update(stream.stats.bytesDelivered, total);
        }
        await output.finish();
      } catch (error) {
        await output.abandon();
        throw error;
      }
      progress.finish();
      const seconds = (performance.now() - started) / 1000;
      const bytes = modelBytes(model);
      const summary = {
        event: 'done',
        format,
        to,
        verified: model.verified,
        files: model.files.length,
        tensors,
        bytes,
        bytesRead: stream.stats.bytesRead,
        bytesCopied: stream.stats.bytesCopied,
        piecesVerified: stream.stats.piecesVerified,
        piecesRejected: stream.stats.piecesRejected,
        seconds,
        mibPerSecond: seconds > 0 ? bytes / MiB / seconds : null,
        memoryBytes,
        residentBytesPeak: stream.stats.residentBytesPeak,
        // maxRSS is in kilobytes: the peak resident memory of this process so far.
        peakRssBytes: process.resourceUsage().maxRSS * 1024,
      };
      if (json) io.stdout(JSON.stringify(summary) + '\n');
      else {
        io.stdout(
          `loaded ${tensors} tensors, ${formatBytes(bytes)} in ${model.files.length} files into ${to} (${format}) ` +
            `in ${formatSeconds(seconds)}, ${formatRate(bytes, seconds)}\n` +
            `peak RSS ${formatBytes(summary.peakRssBytes)}; buffers at most ${formatBytes(summary.residentBytesPeak)} of the ${formatBytes(memoryBytes)} budget\n` +
            (model.verified
              ? `every byte verified: ${summary.piecesVerified} pieces against the manifest\n`
              : 'not verified: no manifest (headers validated, bytes trusted)\n'),
        );
      }
      return 0;
    } finally {
      await closeModelSource(model);
      await origin.close();
    }
  } catch (error) {
    progress.finish();
    return reportError(io, error, json);
  }
}

function parseFormat(text: string): 'hf' | 'shm' {
  if (text === 'hf' || text === 'shm') return text;
  throw new WeightcastError('USAGE', `--format must be hf or shm, got ${JSON.stringify(text)}`);
}

/** The last path segment of SRC, made safe for a directory name. */
function outputName(src: string): string {
  const trimmed = src.replace(/[?#].*$/, '').replace(/\/+$/, '');
  const name = basename(trimmed).replace(/[^A-Za-z0-9._-]/g, '_');
  return name === '' || name === '.' || name === '..' ? 'model' : name;
}
