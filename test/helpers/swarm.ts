/**
 * Test helpers for talking to a real scheduler without an agent: a small manifest of made-up piece
 * digests, and a bare registration over HTTP (what an agent's first message carries).
 */

import { createHash } from 'node:crypto';
import { encodeManifest, type Manifest } from '../../src/manifest/manifest.js';
import { merkleRoot } from '../../src/manifest/merkle.js';
import type { ServiceAccess } from '../../src/auth/transport.js';
import { callJson } from '../../src/swarm/wire/http-json.js';
import { encodeBitfield } from '../../src/swarm/wire/protocol.js';
import type { MemberIdentity } from '../../src/swarm/agent/scheduler-session.js';
import type { MemberStore } from '../../src/swarm/agent/member-store.js';

/** A member's identity in tests that never serve a peer: an address nothing listens on, fast links. */
export function testIdentity(name: string): MemberIdentity {
  return { name, url: 'http://127.0.0.1:9/', uploadBytesPerSecond: 1e8, downloadBytesPerSecond: 1e8 };
}

/** A one-file manifest of `pieces` 64 KiB pieces; `salt` makes different models of the same size. */
export function fakeManifest(pieces: number, salt = 'c'): Manifest {
  const digests = Array.from({ length: pieces }, (_, i) =>
    createHash('sha256').update(`${salt}${i}`).digest('hex'),
  );
  return {
    pieceSize: 65536,
    files: [{ path: 'w.bin', size: pieces * 65536, merkleRoot: merkleRoot(digests), pieces: digests }],
  };
}

/**
 * Registers a host holding nothing with the swarm at `swarmUrl` (`.../v1/swarms/:model`), sending the
 * manifest along; returns the scheduler's reply unchecked.
 */
export async function registerBareHost(
  swarmUrl: string,
  manifest: Manifest,
  options: { name: string; assignmentsInReply?: boolean; url?: string; access?: ServiceAccess },
): Promise<unknown> {
  const pieces = manifest.files.reduce((sum, file) => sum + file.pieces.length, 0);
  return callJson(`${swarmUrl}/hosts`, 'the scheduler', {
    method: 'POST',
    timeoutMs: 5000,
    access: options.access,
    body: {
      name: options.name,
      url: options.url ?? 'http://127.0.0.1:9/',
      uploadBytesPerSecond: 1e8,
      downloadBytesPerSecond: 1e8,
      have: encodeBitfield(pieces, () => false),
      manifest: encodeManifest(manifest).toString('utf8'),
      ...(options.assignmentsInReply === undefined ? {} : { assignmentsInReply: options.assignmentsInReply }),
    },
  });
}

/** A member's store that holds nothing and is never written (a session only reads what it holds). */
export function emptyStore(): MemberStore {
  return {
    complete: false,
    heldCount: 0,
    has: () => false,
    put: () => Promise.reject(new Error('not used')),
  };
}
