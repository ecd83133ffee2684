/**
 * Shared fixtures for the origin tests: a temporary model directory filled with random bytes, and
 * a loopback file server whose fault hook each test supplies.
 */

import { randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { startFileServer, type FaultHook, type FileServer } from '../../src/origin/file-server.js';

export interface TempModel {
  dir: string;
  files: Map<string, Buffer>;
  remove(): Promise<void>;
}

/** Writes each `path -> size` (random bytes) or `path -> content` into a fresh temporary directory. */
export async function makeTempModel(spec: Record<string, number | string>): Promise<TempModel> {
  const dir = await mkdtemp(join(tmpdir(), 'weightcast-origin-'));
  const files = new Map<string, Buffer>();
  for (const [path, content] of Object.entries(spec)) {
    const bytes = typeof content === 'number' ? randomBytes(content) : Buffer.from(content);
    await mkdir(dirname(join(dir, path)), { recursive: true });
    await writeFile(join(dir, path), bytes);
    files.set(path, bytes);
  }
  return { dir, files, remove: () => rm(dir, { recursive: true, force: true }) };
}

export function fileBytes(model: TempModel, path: string): Buffer {
  const bytes = model.files.get(path);
  if (bytes === undefined) throw new Error(`test fixture has no ${path}`);
  return bytes;
}

export function serve(root: string, faults?: FaultHook, token?: string): Promise<FileServer> {
  return startFileServer({
    root,
    ...(faults === undefined ? {} : { faults }),
    ...(token === undefined ? {} : { token }),
  });
}

/** Resolves with the rejection of `promise`, failing if it resolves. */
export async function rejection(promise: Promise<unknown>): Promise<unknown> {
  try {
    await promise;
  } catch (error) {
    return error;
  }
  throw new Error('expected a rejection');
}
