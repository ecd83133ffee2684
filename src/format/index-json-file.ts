/** Reading and writing `model.safetensors.index.json` files (the parsing and serialising: index-json.ts). */

import { readFile, writeFile } from 'node:fs/promises';
import { parseIndexJson, serializeIndexJson, type SafetensorsIndex } from './index-json.js';

export async function readIndexJson(
  path: string,
  options: { signal?: AbortSignal } = {},
): Promise<SafetensorsIndex> {
  const text = await readFile(path, {
    encoding: 'utf8',
    ...(options.signal ? { signal: options.signal } : {}),
  });
  return parseIndexJson(text, path);
}

export async function writeIndexJson(path: string, index: SafetensorsIndex): Promise<void> {
  await writeFile(path, serializeIndexJson(index));
}
