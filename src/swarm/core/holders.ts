/**
 * Who holds what, laid out for parent search: a piece-major bitmap with one row of host bits per
 * piece (100,000 pieces x 1024 host bits = 12.8 MB), next to the host-major bitfields that answer
 * "does this host hold that piece". Host sets that change often (hosts with a free upload slot) or
 * group hosts (a rack, a zone) are bitsets over host ids of the same width, so the eligible holders
 * of a piece near a host are a few word ANDs over contiguous memory, exact, with no sampling.
 */

import { assert } from '../../errors.js';

/** The holder bitmap's size limit in 32-bit words (512 MiB): 40,000 hosts at 100,000 pieces. */
export const HOLDER_WORDS_MAX = 2 ** 27;

/** A growable set of host ids as bits; `words` is read directly by the scans. */
export class HostBits {
  words = new Uint32Array(1);

  has(host: number): boolean {
    const w = host >>> 5;
    return w < this.words.length && ((this.words[w]! >>> (host & 31)) & 1) === 1;
  }

  add(host: number): void {
    this.ensure(host);
    this.words[host >>> 5]! |= 1 << (host & 31);
  }

  delete(host: number): void {
    const w = host >>> 5;
    if (w < this.words.length) this.words[w]! &= ~(1 << (host & 31));
  }

  /** Makes room for `host`; new words are empty. */
  ensure(host: number): void {
    const needed = (host >>> 5) + 1;
    if (needed <= this.words.length) return;
    const grown = new Uint32Array(Math.max(needed, this.words.length * 2));
    grown.set(this.words);
    this.words = grown;
  }
}

/**
 * Hosts grouped by a label (rack or zone id): a bitset per label plus the indices of its non-zero
 * words, so a scan of one rack touches only the words where its hosts are.
 */
export class LabelGroups {
  private readonly members: HostBits[] = [];
  private readonly wordLists: number[][] = [];

  add(label: number, host: number): void {
    const bits = (this.members[label] ??= new HostBits());
    const list = (this.wordLists[label] ??= []);
    bits.add(host);
    if (!list.includes(host >>> 5)) list.push(host >>> 5);
  }

  delete(label: number, host: number): void {
    const bits = this.members[label];
    if (bits === undefined) return;
    bits.delete(host);
    if (bits.words[host >>> 5] === 0) {
      const list = this.wordLists[label]!;
      list.splice(list.indexOf(host >>> 5), 1);
    }
  }

  /** The label's bitset words (empty set: undefined). */
  bits(label: number): Uint32Array | undefined {
    return this.members[label]?.words;
  }

  /** Indices of the label's non-zero words. */
  wordIndices(label: number): readonly number[] {
    return this.wordLists[label] ?? [];
  }
}

/** For each piece, the set of hosts that hold it and may serve it. */
export class HolderBits {
  private readonly pieceCount: number;
  /** Words per piece row; rows are re-laid out when the host capacity grows. */
  rowWords = 1;
  rows: Uint32Array;

  constructor(pieceCount: number) {
    this.pieceCount = pieceCount;
    this.rows = new Uint32Array(pieceCount);
  }

  /** Makes room for host ids below `hostCount`. */
  ensureHosts(hostCount: number): void {
    const needed = (hostCount + 31) >>> 5;
    if (needed <= this.rowWords) return;
    const limit = Math.floor(HOLDER_WORDS_MAX / this.pieceCount);
    assert(
      needed <= limit,
      `host id ${hostCount - 1} needs a holder bitmap over 512 MiB: host ids must be dense`,
    );
    const rowWords = Math.min(limit, Math.max(needed, this.rowWords * 2));
    const rows = new Uint32Array(this.pieceCount * rowWords);
    for (let piece = 0; piece < this.pieceCount; piece++) {
      rows.set(this.rows.subarray(piece * this.rowWords, (piece + 1) * this.rowWords), piece * rowWords);
    }
    this.rows = rows;
    this.rowWords = rowWords;
  }

  has(piece: number, host: number): boolean {
    const word = host >>> 5;
    // A host id beyond the rows' width holds nothing (and must not read the next piece's row).
    if (word >= this.rowWords) return false;
    return ((this.rows[piece * this.rowWords + word]! >>> (host & 31)) & 1) === 1;
  }

  set(piece: number, host: number): void {
    this.rows[piece * this.rowWords + (host >>> 5)]! |= 1 << (host & 31);
  }

  clear(piece: number, host: number): void {
    this.rows[piece * this.rowWords + (host >>> 5)]! &= ~(1 << (host & 31));
  }
}
