/** Byte-for-byte comparison of a copy with the origin's files, for the demo and the tests. */

import { open } from 'node:fs/promises';
import { join } from 'node:path';
import type { Manifest } from '../src/manifest/manifest.js';

/** Compares two files byte for byte in 4 MiB steps. */
async function sameBytes(a: string, b: string): Promise<boolean> {
  const [fa, fb] = await Promise.all([open(a, 'r'), open(b, 'r')]);
  try {
    const [sa, sb] = await Promise.all([fa.stat(), fb.stat()]);
    if (sa.size !== sb.size) return false;
    const ba = Buffer.allocUnsafe(4 << 20);
    const bb = Buffer.allocUnsafe(4 << 20);
    for (let offset = 0; offset < sa.size; offset += ba.length) {
      const length = Math.min(ba.length, sa.size - offset);
      await Promise.all([fa.read(ba, 0, length, offset), fb.read(bb, 0, length, offset)]);
      if (ba.compare(bb, 0, length, 0, length) !== 0) return false;
    }
    return true;
  } finally {
    await Promise.all([fa.close(), fb.close()]);
  }
}

export async function identicalToOrigin(
  dir: string,
  originDir: string,
  manifest: Manifest,
): Promise<boolean> {
  for (const file of manifest.files) {
    if (!(await sameBytes(join(dir, file.path), join(originDir, file.path)))) return false;
  }
  return true;
}
