/**
 * Piece bitfields: one bit per piece in a Uint32Array, bit `i` in word `i >> 5`. A host's held pieces
 * and its pieces in flight are each one bitfield (12.5 KB per host at 100,000 pieces), so 1000 hosts
 * cost 25 MB and every membership test is one load and one shift.
 */

export function bitfieldWords(bits: number): number {
  return (bits + 31) >>> 5;
}

export function newBitfield(bits: number): Uint32Array {
  return new Uint32Array(bitfieldWords(bits));
}

export function hasBit(words: Uint32Array, index: number): boolean {
  return ((words[index >>> 5]! >>> (index & 31)) & 1) === 1;
}

export function setBit(words: Uint32Array, index: number): void {
  words[index >>> 5]! |= 1 << (index & 31);
}

export function clearBit(words: Uint32Array, index: number): void {
  words[index >>> 5]! &= ~(1 << (index & 31));
}

/** Index of the lowest set bit of a non-zero 32-bit word. */
export function lowestBit(word: number): number {
  return 31 - Math.clz32(word & -word);
}

/**
 * Writes into `out` the indices below `bits` whose bit is clear in `words`, starting at a word
 * offset so different callers do not all list the same pieces first; stops when `out` is full.
 * Returns how many were written.
 */
export function collectClearBits(
  words: Uint32Array,
  bits: number,
  startWord: number,
  out: Int32Array,
): number {
  const wordCount = words.length;
  let written = 0;
  for (let step = 0; step < wordCount && written < out.length; step++) {
    const w = (startWord + step) % wordCount;
    let clear = ~words[w]! | 0;
    while (clear !== 0 && written < out.length) {
      const bit = lowestBit(clear);
      clear &= clear - 1;
      const index = (w << 5) + bit;
      if (index < bits) out[written++] = index;
    }
  }
  return written;
}
