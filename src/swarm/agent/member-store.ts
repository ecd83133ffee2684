/**
 * What a swarm member needs of its piece store (MemberStore), and a store still opening
 * (OpeningStore): a fresh cache holds nothing, so its member can register and start fetching while
 * the cache's files are created, which under a crowd of agents joining at once took 40-60 ms on the
 * testbed. Bytes wait for the store only when they are ready to be written.
 */

import type { PieceStore, PutResult } from '../../piece/store.js';

/** The part of PieceStore a SwarmMember uses. */
export interface MemberStore {
  readonly complete: boolean;
  readonly heldCount: number;
  has(piece: number): boolean;
  /** Verifies `bytes` against the manifest and stores them; corrupt bytes are never written. */
  put(piece: number, bytes: Uint8Array): Promise<PutResult>;
}

/**
 * A store that is opening and known to open empty (its cache had no state file): until it is
 * open it holds nothing; `put` waits for it. Once open, every call goes to it. If it fails to open,
 * `put` rejects with that error (the joining agent reports the failure itself).
 */
export class OpeningStore implements MemberStore {
  private store: PieceStore | undefined;
  private readonly opening: Promise<PieceStore>;

  constructor(opening: Promise<PieceStore>) {
    this.opening = opening.then((store) => {
      this.store = store;
      return store;
    });
    // The joining agent awaits the same promise and reports a failure; this copy must not be unhandled.
    this.opening.catch(() => undefined);
  }

  get complete(): boolean {
    return this.store?.complete ?? false;
  }

  get heldCount(): number {
    return this.store?.heldCount ?? 0;
  }

  has(piece: number): boolean {
    return this.store?.has(piece) ?? false;
  }

  async put(piece: number, bytes: Uint8Array): Promise<PutResult> {
    return (this.store ?? (await this.opening)).put(piece, bytes);
  }
}
